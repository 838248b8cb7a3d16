"""`rfteval view`: the sample viewer. model.py builds the pages' data with compare's library code; server.py
serves it (Starlette, the `view` extra); bundle.py writes the same pages as static files; static/ is the page."""
