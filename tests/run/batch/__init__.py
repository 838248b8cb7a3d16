"""Tests of rfteval/run/batch/: test_<module>.py for rfteval/run/batch/<module>.py (tests/README.md)."""
