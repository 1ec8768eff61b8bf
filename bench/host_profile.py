"""Where the host's time goes in a compiled step: enqueue time per call and a cProfile breakdown.

    python3 bench/host_profile.py gpt2_infer gpt2_train [--calls 20]

For each workload of bench/gpu_bench.py and each side (eager, torch.compile,
tensorjit): the host time of one step measured with an empty GPU queue (synchronize,
then time until the step returns: GPU work is asynchronous, so this is what the
host spends enqueuing), next to the GPU-bound step time. A step whose host time
exceeds its device time is host-bound. Then the top functions by own time under
cProfile for tensorjit.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
import gpu_bench  # noqa: E402


def host_ms(step, calls: int) -> float:
    samples = []
    for _ in range(calls):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        samples.append((time.perf_counter() - start) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("workloads", nargs="+")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--cprofile", action="store_true", help="also print cProfile's top functions for tensorjit")
    arguments = parser.parse_args()
    workloads = {w.name: w for w in gpu_bench.WORKLOADS}
    for name in arguments.workloads:
        workload = workloads[name]
        for side in ("eager", "torch.compile", "tensorjit"):
            model, inputs = workload.build()
            if side == "eager":
                function = model
            elif side == "torch.compile":
                function = torch.compile(model)
            else:
                function = gpu_bench.tensorjit_compile(model, inputs)
            step = gpu_bench.make_step(function, inputs, workload.train, model)
            for _ in range(3):
                step()
            host = host_ms(step, arguments.calls)
            device = gpu_bench.median_ms(step)
            print(f"{name:12s} {side:14s} host {host:8.3f} ms   step {device:8.3f} ms", flush=True)
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as trace:
                for _ in range(5):
                    step()
                torch.cuda.synchronize()
            events = trace.key_averages()
            top = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:12]
            print("    ops by own host time over 5 steps: " + "; ".join(
                f"{e.key} x{e.count // 5} {e.self_cpu_time_total / 5e3:.2f}ms" for e in top), flush=True)
            if side == "tensorjit" and arguments.cprofile:
                profiler = cProfile.Profile()
                profiler.enable()
                for _ in range(5):
                    step()
                torch.cuda.synchronize()
                profiler.disable()
                text = io.StringIO()
                pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(30)
                print(text.getvalue()[-6000:])
            del function, model, step
            gpu_bench.reset_compilers()


if __name__ == "__main__":
    main()
