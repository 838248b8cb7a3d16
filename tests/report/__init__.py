"""Tests of rfteval/report/: test_<module>.py for rfteval/report/<module>.py (tests/README.md)."""
