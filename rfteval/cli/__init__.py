"""The Typer app (rfteval.cli.app) and one module per command (rfteval.cli.commands)."""
