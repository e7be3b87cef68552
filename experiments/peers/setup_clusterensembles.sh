#!/usr/bin/env bash
# ClusterEnsembles (CSPA/HGPA/MCLA/HBGF/NMF peer; it calls KaHyPar for HGPA and
# pymetis for CSPA/MCLA) in a venv of its own, outside every repository, for
# experiments/bench_graph_consensus.py.  Rerunnable.
#   bash experiments/peers/setup_clusterensembles.sh   # -> /work/peers/ce-venv
# Exits 3 (and says so) when the package index this machine reaches has no
# ClusterEnsembles distribution; the benchmark then prints our side only, with
# the peer's CSPA algorithm (METIS on raw co-occurrence counts) and HGPA objective
# (KaHyPar km1) run by our own code.  Checked again 2026-11-25: `pip download
# ClusterEnsembles` finds no version; its dependencies kahypar and pymetis are
# there.  The similarly named Cluster_Ensembles 1.16 (Giecold, 2015) is on the
# index but is Python 2 code that shells out to bundled 32-bit hMETIS binaries,
# which do not run here (no i386 loader), so it is no substitute.
set -euo pipefail
PEER_ROOT="${PEER_ROOT:-/work/peers}"
VENV="$PEER_ROOT/ce-venv"
PY="${PYTHON:-python3}"
mkdir -p "$PEER_ROOT"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -m pip install --quiet ClusterEnsembles kahypar pymetis scikit-learn; then
  echo "ClusterEnsembles is not installable from the package index reachable here" >&2
  exit 3
fi
"$VENV/bin/python" -c "import ClusterEnsembles as CE; print('ClusterEnsembles', CE.__file__)"
