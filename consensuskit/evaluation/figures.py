"""Where the tutorial notebooks (and scripts) write their figures.

A figure goes, as PNG, to the folder named by the environment variable
``CONSENSUSKIT_FIGURES`` (default ``figures/`` in the working directory), so that
the tests can point every notebook at a temporary folder and check what it drew.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["figure_dir", "save_figure"]


def figure_dir() -> Path:
    """The figure folder (created if missing)."""
    folder = Path(os.environ.get("CONSENSUSKIT_FIGURES", "figures"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def save_figure(fig, name: str, *, dpi: int = 100) -> Path:
    """Save the matplotlib figure ``fig`` as ``<figure_dir>/<name>.png``; return the path."""
    path = figure_dir() / f"{name}.png"
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    return path
