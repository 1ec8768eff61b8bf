"""Where a compiled call's time goes, step by step: every kernel and ATen call of tensorjit's
wrappers timed on its own, and the rest of the call (guards, layout checks, Python glue).

    PYTHONPATH=src python bench/step_times.py llama_small [--calls 300] [--top 25]

Builds a workload of bench/cpu_bench.py on one thread, compiles it with tensorjit with
`config.profile_kernels` (every step inside a `record_function`), and replaces that context
manager by a timer, so each step's time is taken over many calls: the minimum and the median
per step, which a machine shared with other jobs disturbs far less than one profile of a few
calls. "outside steps" is a call's time minus its steps' (guards, input checks, allocation
lines, the calls into the wrapper).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_bench  # noqa: E402

SAMPLES: dict[str, list[float]] = collections.defaultdict(list)


class StepTimer:
    """Stands in for torch.profiler.record_function in the generated wrappers."""

    def __init__(self, label: str):
        self.label = label

    def __enter__(self):
        self.start = time.perf_counter_ns()

    def __exit__(self, *exception):
        SAMPLES[self.label].append((time.perf_counter_ns() - self.start) / 1e3)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("workload")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--top", type=int, default=25)
    options = parser.parse_args()
    torch.set_num_threads(1)
    import tensorjit
    from tensorjit.config import config

    config.profile_kernels = True
    torch.profiler.record_function = StepTimer  # read when each wrapper is generated
    workload = cpu_bench.BY_NAME[options.workload]
    torch.manual_seed(0)
    model, inputs = getattr(cpu_bench, workload.build)()
    model.train(workload.train)
    function = tensorjit.compile(model)
    if workload.train:
        function = cpu_bench._training_step(function, model)
    context = contextlib.nullcontext() if workload.train else torch.no_grad()
    calls = []
    with context:
        for _ in range(5):
            function(*inputs)
        SAMPLES.clear()
        for _ in range(options.calls):
            start = time.perf_counter_ns()
            function(*inputs)
            calls.append((time.perf_counter_ns() - start) / 1e3)
    per_call = {label: sum(times) / options.calls for label, times in SAMPLES.items()}
    inside = sum(per_call.values())
    print(f"{options.workload}: call median {statistics.median(calls):.1f} us, fastest {min(calls):.1f} us; "
          f"steps {len(SAMPLES)}, their mean sum {inside:.1f} us; outside steps ~{statistics.mean(calls) - inside:.1f} us")
    kinds = collections.Counter()
    for label, value in per_call.items():
        kinds["ATen calls" if " extern " in label else "kernels"] += value
    print("  by kind (mean us per call): " + ", ".join(f"{k} {v:.1f}" for k, v in kinds.items()))
    rows = sorted(SAMPLES.items(), key=lambda item: -statistics.median(item[1]) * len(item[1]))
    for label, times in rows[:options.top]:
        count = len(times) / options.calls
        print(f"  {statistics.median(times):8.2f} us median {min(times):8.2f} min  x{count:g}  {label}")


if __name__ == "__main__":
    main()
