"""Throughput of the tj_ vector math vs a scalar std:: loop vs torch eager, on 1M float32 values.

Prints a markdown table of elements per second (single thread for the C++ loops; torch with
1 thread and with its default thread count).

Usage: PYTHONPATH=src python bench/vector_math.py [--runs N]
"""

import argparse
import ctypes
import os
import statistics
import subprocess
import tempfile
import time

import torch

from tensorjit.codegen.cpp.compiler import FLAGS
from tensorjit.codegen.cpp.vector_math import FLOAT32_FUNCTIONS, GENERIC, VECTOR_MATH

EAGER = {"exp": torch.exp, "log": torch.log, "log1p": torch.log1p, "expm1": torch.expm1, "tanh": torch.tanh,
         "sigmoid": torch.sigmoid, "erf": torch.erf}


def build() -> ctypes.CDLL:
    parts = ["#include <cmath>\n", VECTOR_MATH]
    for op, function in FLOAT32_FUNCTIONS.items():
        scalar = GENERIC[op].replace("(T)", "(float)")
        parts.append(
            f'extern "C" void tj_{op}(const float* __restrict in, float* __restrict out, long n) {{\n'
            f"  for (long i = 0; i < n; ++i) out[i] = {function}(in[i]);\n}}\n"
            f'extern "C" void std_{op}(const float* __restrict in, float* __restrict out, long n) {{\n'
            f"  for (long i = 0; i < n; ++i) {{ const float x = in[i]; out[i] = {scalar}; }}\n}}\n")
    path = os.path.join(tempfile.mkdtemp(prefix="tj_bench_vm_"), "bench.so")
    subprocess.run(["g++", *FLAGS, "-x", "c++", "-", "-o", path], input="".join(parts), text=True, check=True)
    return ctypes.CDLL(path)


def rate(function, runs: int, count: int) -> float:
    function()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return count / statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    library = build()
    count = 1 << 20
    x = torch.rand(count) * 8 - 4
    x_positive = torch.rand(count) * 8 + 1e-3
    out = torch.empty_like(x)
    threads = torch.get_num_threads()
    print(f"| op | tj_ loop (1 thread) | std:: loop (1 thread) | eager (1 thread) | eager ({threads} threads) |")
    print("|---|---|---|---|---|")
    for op in FLOAT32_FUNCTIONS:
        data = x_positive if op == "log" else (x.abs() if op == "log1p" else x)
        pointers = (ctypes.c_void_p(data.data_ptr()), ctypes.c_void_p(out.data_ptr()), ctypes.c_long(count))
        ours = rate(lambda: getattr(library, f"tj_{op}")(*pointers), args.runs, count)
        scalar = rate(lambda: getattr(library, f"std_{op}")(*pointers), args.runs, count)
        torch.set_num_threads(1)
        eager_one = rate(lambda: EAGER[op](data, out=out), args.runs, count)
        torch.set_num_threads(threads)
        eager_all = rate(lambda: EAGER[op](data, out=out), args.runs, count)
        print(f"| {op} | {ours / 1e6:.0f} M/s | {scalar / 1e6:.0f} M/s | {eager_one / 1e6:.0f} M/s | {eager_all / 1e6:.0f} M/s |")


if __name__ == "__main__":
    main()
