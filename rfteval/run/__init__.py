"""The eval run: the spec, the pipeline, its store and result files, summary.json."""
