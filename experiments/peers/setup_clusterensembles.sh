#!/usr/bin/env bash
# ClusterEnsembles (CSPA/HGPA/MCLA/HBGF/NMF peer; it calls KaHyPar for HGPA and
# pymetis for CSPA/MCLA) in a venv of its own, outside every repository, for
# experiments/bench_graph_consensus.py.  Rerunnable.
#   bash experiments/peers/setup_clusterensembles.sh   # -> /work/peers/ce-venv
# Exits 3 (and says so) when the package index this machine reaches has no
# ClusterEnsembles distribution; the benchmark then prints our side only.
set -euo pipefail
PEER_ROOT="${PEER_ROOT:-/work/peers}"
VENV="$PEER_ROOT/ce-venv"
PY="${PYTHON:-python3}"
mkdir -p "$PEER_ROOT"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -m pip install --quiet ClusterEnsembles scikit-learn; then
  echo "ClusterEnsembles is not installable from the package index reachable here" >&2
  exit 3
fi
"$VENV/bin/python" -c "import ClusterEnsembles as CE; print('ClusterEnsembles', CE.__file__)"
