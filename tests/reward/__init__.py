"""Tests of rfteval/reward/: test_<module>.py for rfteval/reward/<module>.py (tests/README.md)."""
