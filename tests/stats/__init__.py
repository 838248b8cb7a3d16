"""Tests of rfteval/stats/: test_<module>.py for rfteval/stats/<module>.py (tests/README.md)."""
