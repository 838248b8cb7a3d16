"""Tests of rfteval/view/: test_<module>.py for rfteval/view/<module>.py (tests/README.md)."""
