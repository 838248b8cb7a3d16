"""Tests of rfteval/compare/: test_<module>.py for rfteval/compare/<module>.py (tests/README.md)."""
