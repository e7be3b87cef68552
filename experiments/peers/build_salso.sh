#!/usr/bin/env bash
# Build the R peers used by experiments/partition_posterior_vs_salso.py, outside the repo.
#
#   R's salso (Dahl, Johnson & Mueller 2022) from its source release tarball (which vendors its
#   Rust crates, so the build is offline), installed into /work/peers/Rlib.
#
# Nothing built here is committed.  Inputs:
#   SALSO_TARBALL  path of salso_<version>.tar.gz (default: /work/peers/salso_0.3.35.tar.gz; the
#                  release tarballs are in the public github repository dbdahl/salso, releases/).
#   PEERS          output root (default /work/peers).
# Debian (bookworm) packages no r-cran-salso, so the script installs R from Debian and builds
# salso from source.  salso's configure resolves `cargo` with normalizePath(), which turns
# rustup's proxy symlink into the `rustup` binary itself; a plain wrapper script named cargo,
# first on PATH, that execs the toolchain's real cargo avoids that.
set -euo pipefail
PEERS=${PEERS:-/work/peers}
SALSO_TARBALL=${SALSO_TARBALL:-$PEERS/salso_0.3.35.tar.gz}
LIB=$PEERS/Rlib

if ! command -v Rscript >/dev/null; then
    apt-cache policy r-cran-salso | grep -q Candidate && HAVE_DEB=1 || HAVE_DEB=0
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends r-base-core r-base-dev
    if [ "$HAVE_DEB" = 1 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y r-cran-salso
    fi
fi

mkdir -p "$LIB" "$PEERS/bin"
if Rscript -e 'quit(status = !requireNamespace("salso", quietly = TRUE))' \
        >/dev/null 2>&1 || R_LIBS="$LIB" Rscript -e \
        'quit(status = !requireNamespace("salso", quietly = TRUE))' >/dev/null 2>&1; then
    echo "salso already installed"; exit 0
fi
[ -f "$SALSO_TARBALL" ] || { echo "missing $SALSO_TARBALL" >&2; exit 1; }

REAL_CARGO=$(rustup which cargo 2>/dev/null || command -v cargo)
printf '#!/bin/sh\nexec "%s" "$@"\n' "$REAL_CARGO" > "$PEERS/bin/cargo"
chmod +x "$PEERS/bin/cargo"
export PATH="$PEERS/bin:$(dirname "$REAL_CARGO"):$PATH"
export RUSTUP_HOME=${RUSTUP_HOME:-$HOME/.rustup}

R CMD INSTALL --library="$LIB" "$SALSO_TARBALL"
R_LIBS="$LIB" Rscript -e 'library(salso); cat("salso", format(packageVersion("salso")), "\n")'
