"""Tests of rfteval/providers/: test_<module>.py for rfteval/providers/<module>.py (tests/README.md)."""
