"""The path of ``BCE.fit`` then ``perplexity`` through the package: modules entered, climbs.

Traces (``sys.setprofile``) one small ``ck.BCE(n_clusters=3).fit(X).perplexity(X_held)``
and prints the ordered list of the package's modules that run a function, consecutive
repeats collapsed, the number of distinct files among them, and the number of climbs.

Layers.  Each module of the package sits in a layer, by its package:

    0  base, data.*, io.*, models.convention, models.vector_math   (foundations)
    1  inference.*                                (family-independent machinery)
    2  models.<family>.*, models.family, models.simulation      (the families)
    3  consensus.*, evaluation.*, distributed.*       (built on the families)
    4  cli.*, the package's __init__ and _moved              (entry points)

Before the family packages, the old paths map the same way:
``models.bce``/``_convention`` (spec modules) to 2 and 0,
``inference.bce_cavi``/``_bce_numba``/``bce_alpha``/
``bce_svi``/``mm_em``/``nbce_*``/``pcc_descent`` (one-family engines) to 2,
``estimators.*`` to 2 (``estimators.pyro``, the generic PyroConsensus, to 1), the loose
top-level modules (``ensemble``, ``checkpoint``, ``metrics`` ...) to 0 or 3 by what they
are (see :data:`OLD`).

A *climb* is a return from a function of module ``A`` to its caller in module ``B`` with
``layer(B) > layer(A)``: control goes back up the layers.  Only returns between two
modules of the package count (calls into numpy, torch or numba and back are not steps of
the path).  The count is of distinct ``(A, B)`` pairs, in the order first seen: a place
where the path climbs back, however often a loop repeats it.  The traced call follows an
identical untraced one, so no import or compilation happens inside it.

Usage (from a checkout; ``PYTHONPATH`` picks the tree to measure)::

    PYTHONPATH=. python experiments/call_path.py
    PYTHONPATH=/tmp/old python experiments/call_path.py      # an older tree
"""

from __future__ import annotations

import os
import sys

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")

#: old module (before the family packages) -> layer
OLD = {
    "ensemble": 0, "checkpoint": 0, "persistence": 0, "label_files": 0, "datasets": 0,
    "generate": 0, "estimator_options": 4, "demo": 4, "warmup": 4, "cli": 4,
    "metrics": 3, "heldout": 3, "comparison": 3, "figures": 3,
}


def layer(module: str) -> int:
    """The layer of ``module`` (a dotted name inside the package; see the docstring)."""
    parts = module.split(".")[1:]
    if not parts or parts[0] in ("_moved",):
        return 4
    head = parts[0]
    if head in ("base", "data", "io"):
        return 0
    if head == "models":
        if len(parts) > 1 and parts[1] in ("convention", "_convention", "vector_math"):
            return 0
        return 2
    if head == "inference":
        rest = parts[1] if len(parts) > 1 else ""
        family_engine = rest.startswith(("bce", "_bce", "gbce", "mm", "_mm", "nbce", "pcc"))
        return 2 if family_engine else 1
    if head == "estimators":  # the old home of the estimators; PyroConsensus is generic
        return 1 if parts[-1] == "pyro" else 2
    if head in ("consensus", "evaluation", "distributed"):
        return 3
    if head == "cli":
        return 4
    return OLD.get(head, 4)


def trace(run):
    """``(path, climbs)`` of ``run()``: the package's modules entered, in order, consecutive
    repeats collapsed, and the climbs ``(from module, to module)`` (see the docstring)."""
    path, returns = [], []

    def module_of(frame):
        name = frame.f_globals.get("__name__", "") if frame is not None else ""
        return name if name == "consensuskit" or name.startswith("consensuskit.") else None

    def profile(frame, event, arg):
        mod = module_of(frame)
        if mod is None:
            return
        if event == "call" and (not path or path[-1] != mod):
            path.append(mod)
        elif event == "return":
            caller = module_of(frame.f_back)
            if caller is not None and caller != mod and (not returns
                                                          or returns[-1] != (mod, caller)):
                returns.append((mod, caller))

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    climbs = []
    for a, b in returns:
        if layer(b) > layer(a) and (a, b) not in climbs:
            climbs.append((a, b))
    return path, climbs


def main():
    import consensuskit as ck

    rng = np.random.default_rng(0)
    truth = rng.integers(0, 3, size=150)
    X = np.column_stack([np.where(rng.random(150) < 0.8, truth, rng.integers(0, 3, 150))
                         for _ in range(6)])
    X_train, X_held = X[:120], X[120:]
    ck.BCE(n_clusters=3, random_state=0).fit(X_train).perplexity(X_held)  # compile, import

    path, climbs = trace(lambda: ck.BCE(n_clusters=3, random_state=0).fit(X_train)
                         .perplexity(X_held))
    print(f"package at {os.path.dirname(ck.__file__)}")
    print(f"modules entered, in order (consecutive repeats collapsed): {len(path)} steps")
    print("  " + " > ".join(f"{m[len('consensuskit.'):] or m}[{layer(m)}]" for m in path))
    first = list(dict.fromkeys(path))
    print(f"distinct files: {len(first)}, in order of first entry:")
    for mod in first:
        print(f"  [{layer(mod)}] {mod}")
    print(f"climbs (distinct returns to a caller in a higher layer): {len(climbs)}")
    for a, b in climbs:
        print(f"  {a} [{layer(a)}] -> {b} [{layer(b)}]")


if __name__ == "__main__":
    main()
