"""rfteval: an eval harness for reinforcement fine-tuning.

Light on purpose: importing the package must not pull pandas, pyarrow or openai, so that
`rfteval --help` starts fast. Import from the submodules.
"""

__version__ = "0.1.0"
