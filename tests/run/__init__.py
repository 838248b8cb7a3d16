"""Tests of rfteval/run/: test_<module>.py for rfteval/run/<module>.py (tests/README.md)."""
