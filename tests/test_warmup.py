"""``consensuskit warmup``: it compiles every numba kernel the demo needs into numba's
cache, so that a later process running the demo's models compiles nothing."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import consensuskit
from consensuskit.cli import warmup
from consensuskit.cli.commands import main

PACKAGE = Path(consensuskit.__file__).parent

# Runs the demo's compiled models (MM, BCE, NBCE, PCC) and prints how many numba
# compilations that took: numba's "numba:compile" events, top level only.
COUNT_COMPILES = """
import io, torch
from numba.core import event
torch.set_num_threads(1)
from consensuskit import demo

class Count(event.Listener):
    depth = n = 0
    def on_start(self, ev):
        self.depth += 1
    def on_end(self, ev):
        self.depth -= 1
        self.n += self.depth == 0

c = Count()
event.register("numba:compile", c)
models = [m for m in demo.CONSENSUS_MODELS if m[0].split()[0] in ("MM", "BCE", "NBCE", "PCC")]
demo.run(io.StringIO(), models=models, progress=False)
print("compilations", c.n)
"""


def test_every_numba_module_has_a_warmup_step():
    """A module of the package that defines numba kernels is compiled by some step."""
    covered = {m for _, _, mods in warmup.STEPS for m in mods}
    found = set()
    for path in PACKAGE.rglob("*.py"):
        if re.search(r"^\s*@(numba\.)?njit", path.read_text(), flags=re.M):
            rel = path.relative_to(PACKAGE.parent).with_suffix("")
            found.add(".".join(rel.parts))
    assert found, "no numba module found: the scan is broken"
    assert found <= covered, f"no warm-up step compiles {sorted(found - covered)}"


def test_cli_lists_warmup(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["warmup", "--help"])
    assert exc.value.code == 0
    assert "numba" in capsys.readouterr().out


def _run(code, cache, *args):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), OMP_NUM_THREADS="1",
               PYTHONPATH=str(PACKAGE.parent))
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.slow
def test_demo_compiles_nothing_after_warmup(tmp_path):
    """With a fresh cache the demo's models compile (the count works); after
    ``consensuskit warmup`` into a second fresh cache, the same run compiles nothing."""
    cold = _run(COUNT_COMPILES, tmp_path / "cold")
    assert int(cold.split()[-1]) > 0
    _run("import sys; from consensuskit.cli.commands import main; sys.exit(main(['-q', 'warmup']))",
         tmp_path / "warm")
    warm = _run(COUNT_COMPILES, tmp_path / "warm")
    assert int(warm.split()[-1]) == 0


def test_row_subset_step_reaches_add_rows(monkeypatch):
    """The step for fits above ``max_rows`` calls the kernel that adds the other rows
    (no fit of warm-up size reaches it).  Calls are counted: the kernel's compiled
    signatures could already be there from an earlier large fit in this process."""
    from consensuskit.models.bce import gibbs_kernels

    calls = []
    kernel = gibbs_kernels.add_rows

    def counted(*args):
        calls.append(args[2].size)
        return kernel(*args)

    monkeypatch.setattr(gibbs_kernels, "add_rows", counted)
    warmup._bce_row_subset()
    assert calls and calls[0] > 0, "the step never added rows to a subset chain"
