#!/usr/bin/env bash
# The side-by-side benchmark: hermes-agent 0.19.0, caduceus and the raw limits in one
# interleaved run. Creates the venv if missing, installs deps, builds the Rust raw bench
# and caduceus' release binaries (this repository), runs.
# Creates the venv if missing, installs deps, builds the Rust raw bench, runs.
# Knobs: BENCH_N (default 200 calls per op), BENCH_ROUNDS (default 4 interleaved rounds).
set -euo pipefail
ROOT="${PEER_DIR:-${TMPDIR:-/tmp}/peer}"; SRC="$(cd "$(dirname "$0")" && pwd)"; mkdir -p "$ROOT"; cp -r "$SRC/bench_hermes.py" "$SRC/rawbench" "$ROOT/"
cd "$ROOT"
mkdir -p results work hermes_home
if [ ! -x venv/bin/python ]; then
  python3 -m venv venv
fi
if ! venv/bin/python -c 'import importlib.metadata as m; assert m.version("hermes-agent")=="0.19.0"' 2>/dev/null; then
  venv/bin/pip install -q hermes-agent==0.19.0
fi
# Optional: ripgrep binary from the PyPI wheel, used only for the rg-backend search variant.
if [ ! -x rgtool/bin/rg ]; then
  venv/bin/pip install -q --only-binary=:all: --target "$ROOT/rgtool" 'ripgrep==14.1.0' || echo "ripgrep wheel unavailable; rg variant skipped"
fi
# caduceus (this repository): the binary and its bench driver.
REPO="$(cd "$SRC/../.." && pwd)"
if command -v cargo >/dev/null; then
  (cd "$REPO" && cargo build --release -q -p caduceus -p caduceus-tests --bins)
  export CADBENCH="${CARGO_TARGET_DIR:-$REPO/target}/release/caduceus-bench"
  export CADUCEUS_HOME="$ROOT/caduceus_home"; mkdir -p "$CADUCEUS_HOME"
fi
# Rust raw-limit bench (no deps).
if command -v cargo >/dev/null; then
  (cd rawbench && cargo build --release -q)
else
  echo "cargo missing; Rust raw rows skipped"
fi
venv/bin/python -c 'import sys; print(sys.version)'
# Noisy 2-core box: wait (bounded) for other load to settle before measuring.
if [ "${WAIT_QUIET:-1}" = 1 ]; then
  for i in $(seq 1 "${WAIT_QUIET_MAX_TRIES:-30}"); do
    l=$(cut -d' ' -f1 /proc/loadavg)
    awk -v l="$l" 'BEGIN{exit !(l < 0.7)}' && break
    echo "loadavg $l >= 0.7, waiting 10s ($i)"; sleep 10
  done
fi
BENCH_N="${BENCH_N:-200}" BENCH_ROUNDS="${BENCH_ROUNDS:-4}" \
  venv/bin/python "$ROOT/bench_hermes.py" "$@" 2>"$ROOT/results/bench_stderr.txt" | tee "$ROOT/results/bench_output.txt"
echo "results: $ROOT/results/results.json  $ROOT/results/table.md  $ROOT/results/bench_output.txt"
