"""Tests of rfteval/data/: test_<module>.py for rfteval/data/<module>.py (tests/README.md)."""
