"""The ``consensuskit`` command line (``commands``), the ``demo``, the numba ``warmup`` and
the estimators' command-line ``options``."""

from consensuskit.cli.commands import main

__all__ = ["main"]
