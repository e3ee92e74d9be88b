#!/usr/bin/env bash
# One prepared GPU check for gradfix verify (issue 3). Run from the repository root on a machine
# with CUDA:   bash scripts/cuda_verify.sh [OUT_DIR]
# It prints the environment, runs `gradfix verify --device all` (CPU and CUDA) as a table and as
# JSON, the CUDA verification tests, and the memory/time benchmark on CPU and CUDA. Everything is
# also written to OUT_DIR (default: $OUT if set, else ./cuda_verify_out). Exit status: that of
# `gradfix verify` (0: every verdict as declared, 1: a mismatch, 2: setup problem).
set -u
OUT_DIR="${1:-${OUT:-cuda_verify_out}}"
mkdir -p "$OUT_DIR"
PY="${PYTHON:-python3}"   # set PYTHON=/path/to/python to choose the interpreter
export PYTHONPATH="$(pwd)${PYTHONPATH:+:$PYTHONPATH}"
export CUBLAS_WORKSPACE_CONFIG=:4096:8

{
  echo "== environment"
  "$PY" -c 'import torch, platform; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available()); print("gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"); print("python", platform.python_version())'
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
} 2>&1 | tee "$OUT_DIR/env.txt"

if ! "$PY" -c 'import torch, libcst, typer, rich' 2>/dev/null; then
  echo "missing packages for $PY: needs torch (CUDA build), libcst, typer, rich, pathspec, pytest" | tee -a "$OUT_DIR/env.txt"
  echo "(pip install -e '.[verify,test]' where a package index is reachable)" | tee -a "$OUT_DIR/env.txt"
  exit 2
fi
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "CUDA is not available here: nothing to do on this machine" | tee -a "$OUT_DIR/env.txt"
  exit 2
fi

echo "== gradfix verify --device all"
COLUMNS=200 "$PY" -m gradfix verify --device all 2>&1 | tee "$OUT_DIR/verify_table.txt"
status=${PIPESTATUS[0]}
"$PY" -m gradfix verify --device all --format json > "$OUT_DIR/verify.json" 2>"$OUT_DIR/verify_json.stderr"

echo "== CUDA verification tests"
"$PY" -m pytest -q -p no:cacheprovider tests/test_verify.py -k cuda 2>&1 | tail -5 | tee "$OUT_DIR/pytest_cuda.txt"

echo "== benchmark (CPU and CUDA)"
COLUMNS=200 "$PY" bench/memory_time.py --device all --scale 1,64 --repeat 9 --json "$OUT_DIR/bench.json" 2>&1 \
  | grep -v 'Failed to initialize NumPy' | tee "$OUT_DIR/bench_table.txt"

echo "== done: verify exit status $status; files in $OUT_DIR"
exit "$status"
