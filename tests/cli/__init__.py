"""End-to-end tests of the commands: test_<command>.py runs `rfteval <command>` as a user would (tests/README.md)."""
