"""rfteval's tests, as a package: tests/<package>/test_<module>.py mirrors rfteval/<package>/<module>.py, so basenames
repeat across folders (tests/compare/test_paths.py, tests/run/test_paths.py); each folder is a package, so each test
module has a unique name (tests.compare.test_paths) and the shared helpers import as tests.support.<helper>."""
