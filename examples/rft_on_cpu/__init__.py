"""RFT on a laptop: SmolLM2-135M fine-tuned on CPU by TRL's GRPOTrainer with an rfteval grader as its reward, every
checkpoint served by `transformers serve` and evaluated by `rfteval run` and `rfteval compare` (README.md here;
`make example-rft`, or `python -m examples.rft_on_cpu`)."""
