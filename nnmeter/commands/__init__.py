"""Subcommands of the ``nnmeter`` console script, one module each (see nnmeter.cli)."""
