"""Tests of rfteval/graders/: test_<module>.py for rfteval/graders/<module>.py (tests/README.md)."""
