"""Checks of the project as a whole: the layers, the test layout, the docs and their examples, the public aliases,
the ready-made graders and datasets (tests/README.md)."""
