"""Examples that run end to end on this machine (`make example-rft`); importable, so tests share their parts."""
