#!/bin/bash
# One device-machine call: GPU tests, then the benchmark over the
# workloads named in $WORKLOADS (default: all). Logs go to $OUT (or ./gpu_logs).
# Usage (from the repository root): bash bench/run_gpu.sh [workload ...]
set -o pipefail
OUT=${OUT:-gpu_logs}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=src:site
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" | tee "$OUT/env.txt"
if [ -z "$SKIP_TESTS" ]; then
  timeout 150 python3 -m pytest -q -p no:cacheprovider tests/backends tests/codegen/triton 2>&1 | tee "$OUT/tests.txt" | tail -8
fi
timeout "${BENCH_TIMEOUT:-400}" python3 bench/gpu_bench.py "$@" --json "$OUT/bench.jsonl" --profile "$OUT" 2>&1 | tee "$OUT/bench.txt" | grep -v '^{' | tail -40
