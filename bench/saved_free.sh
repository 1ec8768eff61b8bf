#!/bin/bash
# Training memory with the boxed backward (saved activations freed at their last reader,
# docs/autograd.md): one device-machine call, run once on this branch and once on the commit
# before it (A/B in the same machine kind), from the repository root:
#     bash bench/saved_free.sh            # logs to $OUT (or ./saved_free_logs)
# What to read in $OUT/bench.jsonl, per workload (gpt2_train, densenet121_train, mlp_train):
#   tj_default_peak_mb    should drop against the A side (densenet121: ~60 MB estimated), and
#                         be compared with torch_default_peak_mb (torch.compile's);
#   tj_default_ms         should not rise (a `del` per input; the list is cleared once);
#   tj_ro_peak_reserved_mb / tj_ro_peak_mb  unchanged: a recorded backward is not boxed
#                         (docs/gpu.md: why it does not take the forward's saved blocks).
# The bench's peak is taken after three warm-up steps: the first backward of a graph whose
# ATen calls check their shapes (convolution and attention backwards) keeps its inputs until it
# has passed those checks once, so a first step's peak is the A side's.
# $OUT/wrappers.txt: the backward wrappers take `inputs` and drop them (`del inN` lines).
set -o pipefail
OUT=${OUT:-saved_free_logs}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=src:site
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" | tee "$OUT/env.txt"
git log --oneline -1 | tee -a "$OUT/env.txt"
timeout "${BENCH_TIMEOUT:-500}" python3 bench/cudagraph_bench.py gpt2_train densenet121_train mlp_train \
  --sides torch_default,tj_default,torch_ro,tj_ro --json "$OUT/bench.jsonl" 2>&1 | tee "$OUT/bench.txt" | grep '^{'
TENSORJIT_LOGS=output_code timeout 200 python3 bench/cudagraph_bench.py mlp_train --sides tj_default 2>&1 \
  | grep -E "def run\(inputs\)|^ +del in|kept = " | sort | uniq -c | sort -rn | head -20 | tee "$OUT/wrappers.txt"
