"""Shared machinery of the paper reproductions: sizes, reports, figures.

Every reproduction writes, into its output folder ``out``:

* ``<name>.md``: our numbers beside the paper's, with the difference, the
  number of repeats, the command, the seeds and the wall time;
* ``<name>.csv``: one row per number (experiment part, dataset, method,
  metric, ours, paper, difference, repeats);
* ``<name>_<figure>.png``: the paper's figures, drawn with matplotlib's Agg
  backend.

A run has a *mode*: ``"full"`` (the paper's sizes), ``"quick"`` (few repeats,
a few minutes) or ``"smoke"`` (tiny, seconds; only checks that everything
runs and writes its files).
"""

from __future__ import annotations

import math
import os
import platform
import sys
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

MODES = ("full", "quick", "smoke")


def check_mode(mode):
    """Validate ``mode`` (one of :data:`MODES`)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    return mode


def parse_only(only, parts):
    """The parts selected by ``--only`` (comma-separated), all of ``parts`` if None."""
    if only is None:
        return list(parts)
    chosen = [p.strip() for p in str(only).split(",") if p.strip()]
    unknown = [p for p in chosen if p not in parts]
    if unknown:
        raise ValueError(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(parts)}")
    return chosen


def limit_threads():
    """One torch / BLAS thread: the reproductions run many small fits."""
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:  # pragma: no cover
        pass


#: The papers' published tables, one JSON file per paper (``tables/<paper>.json``).
TABLES_DIR = Path(__file__).resolve().parent / "tables"


def paper_tables(paper: str) -> dict:
    """The published tables of ``paper`` ("bce", "kcc", "mm", "nbce", "pcc"), read from
    ``tables/<paper>.json``: table name -> {row key: row}.

    Each table of the file has ``notes`` (what its columns are, transcription notes),
    ``key`` (the type of its row keys: "str"; "int"; "tuple", written as comma-separated
    integers such as ``"5,2,10"``) and ``rows``; a row is a list of numbers (``null``:
    no value in the paper) or, for PCC, a dict statistic -> list.
    """
    import json

    doc = json.loads((TABLES_DIR / f"{paper}.json").read_text())
    parse = {"str": str, "int": int,
             "tuple": lambda k: tuple(int(v) for v in k.split(","))}
    return {name: {parse[t["key"]](k): v for k, v in t["rows"].items()}
            for name, t in doc["tables"].items()}


def fmt(value, digits=4):
    """A number for a Markdown table (``-`` for missing, ``inf``/``nan`` kept)."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.{digits}f}"


def diff(ours, paper):
    """``ours - paper`` or None when either is missing or not finite."""
    if ours is None or paper is None:
        return None
    ours, paper = float(ours), float(paper)
    if not (math.isfinite(ours) and math.isfinite(paper)):
        return None
    return ours - paper


def markdown_table(header, rows):
    """A GitHub Markdown table from a header list and rows of cells."""
    lines = ["| " + " | ".join(str(h) for h in header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(lines)


@dataclass
class Report:
    """Collects the sections, CSV rows and figures of one reproduction run."""

    name: str
    title: str
    mode: str
    seed: int
    out: str
    argv: list = field(default_factory=list)
    sections: list = field(default_factory=list)
    rows: list = field(default_factory=list)
    figures: list = field(default_factory=list)
    started: float = field(default_factory=time.time)

    def __post_init__(self):
        check_mode(self.mode)
        os.makedirs(self.out, exist_ok=True)

    # -- content -----------------------------------------------------------------
    def add_section(self, heading, text):
        """A Markdown section (``heading`` without ``#``)."""
        self.sections.append(f"## {heading}\n\n{text.strip()}\n")

    def add_row(self, part, dataset, method, metric, ours, paper=None, repeats=None, **extra):
        """One number for the CSV (and the caller's tables)."""
        row = {
            "part": part, "dataset": dataset, "method": method, "metric": metric,
            "ours": None if ours is None else float(ours),
            "paper": None if paper is None else float(paper),
            "difference": diff(ours, paper),
            "repeats": repeats,
        }
        row.update(extra)
        self.rows.append(row)
        return row

    def figure_path(self, tag):
        """Path of figure ``tag``; records it for the Markdown file."""
        path = os.path.join(self.out, f"{self.name}_{tag}.png")
        self.figures.append(os.path.basename(path))
        return path

    # -- output ------------------------------------------------------------------
    def command(self):
        args = " ".join(self.argv) if self.argv else ""
        return f"consensuskit reproduce {self.name} {args}".strip()

    def write(self):
        """Write ``<name>.md`` and ``<name>.csv``; returns their paths."""
        import pandas as pd

        elapsed = time.time() - self.started
        md_path = os.path.join(self.out, f"{self.name}.md")
        csv_path = os.path.join(self.out, f"{self.name}.csv")
        pd.DataFrame(self.rows).to_csv(csv_path, index=False)
        head = [
            f"# {self.title}",
            "",
            f"* command: `{self.command()}`",
            f"* mode: **{self.mode}**; base seed {self.seed} (repeat r of a dataset uses "
            f"seeds derived from it, listed per part below)",
            f"* wall time: {elapsed:.0f} s on {platform.machine()} "
            f"(Python {sys.version.split()[0]}; a shared, contended 2-core machine: "
            f"times are indicative only)",
            f"* numbers: `{os.path.basename(csv_path)}` (one row per number)",
            "",
        ]
        body = "\n".join(self.sections)
        figs = ""
        if self.figures:
            figs = "\n## Figures\n\n" + "\n".join(f"![{f}]({f})" for f in self.figures) + "\n"
        with open(md_path, "w", encoding="utf-8") as fh:
            fh.write("\n".join(head) + "\n" + body + figs)
        return md_path, csv_path


def pyplot():
    """matplotlib.pyplot with the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def line_grid(path, panels, xlabel, ylabel, title=None, ncols=3):
    """Small-multiples line plot.

    Parameters
    ----------
    path : str
        PNG path.
    panels : dict
        ``panel title -> {series name -> (x, y) or (x, y, yerr)}``.
    """
    plt = pyplot()
    n = max(len(panels), 1)
    ncols = min(ncols, n)
    nrows = int(math.ceil(n / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.2 * nrows), squeeze=False)
    for ax, (panel, series) in zip(axes.ravel(), panels.items()):
        for label, data in series.items():
            x, y = np.asarray(data[0], float), np.asarray(data[1], float)
            if len(data) > 2 and data[2] is not None:
                ax.errorbar(x, y, yerr=np.asarray(data[2], float), marker="o", ms=3,
                            capsize=2, label=label)
            else:
                style = "--" if "(paper)" in label else "-"  # published values dashed
                ax.plot(x, y, style, marker="o", ms=3, label=label)
        ax.set_title(panel)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    for ax in axes.ravel()[len(panels):]:
        ax.axis("off")
    handles, labels = axes.ravel()[0].get_legend_handles_labels()
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 1, 0.95 if title else 1))
    if handles:  # to the right of the panels; bbox_inches="tight" keeps it in the image
        fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5),
                   fontsize=8)
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)
    return path


def bar_groups(path, groups, ylabel, title=None):
    """Grouped bar chart: ``groups`` is ``group -> {series -> value}``."""
    plt = pyplot()
    names = list(groups)
    series = []
    for g in names:
        for s in groups[g]:
            if s not in series:
                series.append(s)
    width = 0.8 / max(len(series), 1)
    fig, ax = plt.subplots(figsize=(max(5, 1.1 * len(names) * max(1, len(series)) / 2), 3.6))
    x = np.arange(len(names))
    for i, s in enumerate(series):
        vals = [groups[g].get(s, np.nan) for g in names]
        ax.bar(x + (i - (len(series) - 1) / 2) * width, vals, width, label=s)
    ax.set_xticks(x)
    ax.set_xticklabels(names, rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)
    return path


def seeds(base, *keys):
    """A reproducible 31-bit seed from a base seed and any hashable keys."""
    ss = np.random.SeedSequence([int(base)] + [_key(k) for k in keys])
    return int(ss.generate_state(1, dtype=np.uint32)[0] & 0x7FFFFFFF)


def _key(k):
    if isinstance(k, (int, np.integer)):
        return int(k) & 0xFFFFFFFF
    return zlib.crc32(str(k).encode("utf-8"))  # stable across processes, unlike hash()


def progress_bar(iterable, progress, desc, total=None):
    """tqdm bar (disabled when ``progress`` is False)."""
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, total=total, disable=not progress, leave=False)


def sizes_for(table, mode, repeats, keys):
    """``table[mode]`` with the repeat counts named in ``keys`` set to ``repeats``.

    ``keys`` maps a size name to a function of ``repeats`` (or None for ``repeats``
    itself).  Without ``repeats`` the mode's sizes are returned unchanged.
    """
    sizes = dict(table[check_mode(mode)])
    if repeats is None:
        return sizes
    if isinstance(repeats, bool) or not isinstance(repeats, (int, np.integer)) or repeats < 1:
        raise ValueError(f"repeats must be a positive integer; got {repeats!r}")
    for key, fn in keys.items():
        sizes[key] = int(repeats) if fn is None else fn(int(repeats))
    return sizes


def cli_args(mode, out, data, seed, only, repeats=None):
    """The command-line options that reproduce a run (for the report)."""
    args = []
    if mode != "full":
        args.append(f"--{mode}")
    if repeats is not None:
        args.append(f"--repeats {repeats}")
    if out != "results":
        args.append(f"--out {out}")
    if data:
        args.append(f"--data {data}")
    if seed:
        args.append(f"--seed {seed}")
    if only:
        args.append(f"--only {only}")
    return args


def start_run(name, title, parts_all, sizes_table, repeat_keys, *, mode, out, data, seed,
              only, repeats):
    """What every reproduction's ``run`` does first: one thread, the parts ``--only``
    selects of ``parts_all``, its :class:`Report` (``name``, ``title``, the options that
    rerun it) and its sizes (``sizes_table[mode]``, the counts named in ``repeat_keys``
    overridden by ``--repeats``: :func:`sizes_for`).  Returns ``(report, parts, sizes)``."""
    limit_threads()
    parts = parse_only(only, parts_all)
    rep = Report(name, title, mode, seed, out,
                 argv=cli_args(mode, out, data, seed, only, repeats))
    return rep, parts, sizes_for(sizes_table, mode, repeats, repeat_keys)
