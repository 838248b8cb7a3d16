"""`python -m examples.rft_on_cpu`: the example end to end (pipeline.py)."""

import sys

from examples.rft_on_cpu.pipeline import main

sys.exit(main())
