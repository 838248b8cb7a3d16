"""What the files hold: records, samples, dataset and outputs lines, the run directory's layout, atomic writes. Imports
only rfteval.errors."""
