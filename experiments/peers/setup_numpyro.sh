#!/usr/bin/env bash
# NumPyro + JAX (CPU) in a venv of their own, outside every repository, for
# experiments/bench_vs_numpyro.py.  Rerunnable: an existing venv is reused.
#   bash experiments/peers/setup_numpyro.sh            # -> /work/peers/numpyro-venv
#   PEER_ROOT=/somewhere bash experiments/peers/setup_numpyro.sh
set -euo pipefail
PEER_ROOT="${PEER_ROOT:-/work/peers}"
VENV="$PEER_ROOT/numpyro-venv"
PY="${PYTHON:-python3}"
NUMPYRO_VERSION="${NUMPYRO_VERSION:-0.22.0}"
mkdir -p "$PEER_ROOT"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
# The host's pip constraint file caps torch only; NumPyro needs none of it.
"$VENV/bin/python" -m pip install --quiet "numpyro==$NUMPYRO_VERSION" "jax[cpu]" arviz
"$VENV/bin/python" - <<'PY'
import jax, numpyro
print("numpyro", numpyro.__version__, "jax", jax.__version__, "devices", jax.devices())
PY
