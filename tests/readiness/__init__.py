"""Tests of rfteval/readiness/: test_<module>.py for rfteval/readiness/<module>.py (tests/README.md)."""
