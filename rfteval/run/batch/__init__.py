"""The Batch API path: the journal and the batch phase, the judge batch phase, Ray Data."""
