"""max-autotune's GEMM template on the GPU: each configuration against cuBLAS, per problem.

For GPT-2 small's products (and any given with --shape), in float16, bfloat16 and float32
(TF32 on, as torch.compile's benchmarks run it), with the weight read transposed as a linear
layer reads it: the largest error of each configuration of `gemm_template.HOPPER_CONFIGS`
against a float64 torch.matmul, its median time (triton.testing.do_bench) and cuBLAS's, and
what `GemmChoice` chose when timing on its own. A configuration that fails is reported and
the run goes on. Nothing is cached between runs (a fresh cache directory).

    python bench/gemm_templates.py                          # GPT-2's products, three dtypes
    python bench/gemm_templates.py --dtypes bfloat16 --shape 2048x3072x768
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

os.environ.setdefault("TENSORJIT_CACHE_DIR", tempfile.mkdtemp(prefix="tensorjit_gemm_bench_"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

import torch  # noqa: E402

GPT2_PRODUCTS = ["4096x2304x768", "4096x768x768", "4096x3072x768", "4096x768x3072", "4096x50264x768",
                 "2048x3072x768"]
"""MxNxK of GPT-2 small at 8x512 tokens: attention in-projection, its out-projection, the MLP's
up- and down-projections, the (padded) LM head; and the issue's 2048x768 @ 768x3072."""


def problem_for(a, weight, out, tf32):
    from tensorjit.codegen.triton.gemm_template import GemmProblem

    m, k = a.shape
    n = weight.shape[0]
    return GemmProblem("mm", 1, m, n, k, a.dtype, (0, *a.stride()), (0, *weight.t().stride()), (0, *out.stride()),
                       tf32=tf32)


def run(shape: str, dtype: torch.dtype) -> dict:
    import triton.testing

    from tensorjit.codegen.triton.gemm_choice import GemmChoice
    from tensorjit.codegen.triton.gemm_template import gemm_candidates, gemm_source, kernel_name
    from tensorjit.codegen.triton.launcher import KernelLauncher, load_kernel

    m, n, k = (int(size) for size in shape.split("x"))
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    weight = torch.randn(n, k, device="cuda", dtype=dtype) / k ** 0.5
    out = torch.empty(m, n, device="cuda", dtype=dtype)
    problem = problem_for(a, weight, out, torch.backends.cuda.matmul.allow_tf32)
    expected = a.double() @ weight.double().t()
    kernel = load_kernel(gemm_source(problem), kernel_name(problem))
    row = {"shape": shape, "dtype": str(dtype).removeprefix("torch."),
           "cublas_ms": triton.testing.do_bench(lambda: torch.mm(a, weight.t()), return_mode="median")}
    for shape_ in gemm_candidates(problem):
        name = str(shape_.config)
        try:
            launcher = KernelLauncher(kernel, shape_)
            launcher(a, weight.t(), out)
            torch.cuda.synchronize()
            row[f"{name} error"] = float((out.double() - expected).abs().max() / expected.abs().max())
            row[f"{name} ms"] = triton.testing.do_bench(lambda: launcher(a, weight.t(), out), return_mode="median")
        except Exception as error:  # noqa: BLE001 - report and go on
            row[f"{name} failed"] = f"{type(error).__name__}: {str(error)[:200]}"
    choice = GemmChoice(torch.ops.aten.mm.default, problem, (m, n), (n, 1))
    choice(a, weight.t())
    row["chosen"] = choice.chosen
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", action="append", help="MxNxK (repeatable); default: GPT-2's products")
    parser.add_argument("--dtypes", default="bfloat16,float16,float32")
    parser.add_argument("--json", default=None, help="append one JSON line per problem here")
    arguments = parser.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = True
    for shape in arguments.shape or GPT2_PRODUCTS:
        for dtype in arguments.dtypes.split(","):
            row = run(shape, getattr(torch, dtype))
            times = {key[:-3]: value for key, value in row.items() if key.endswith(" ms") and key != "cublas_ms"}
            best = min(times, key=times.get) if times else None
            worst_error = max((v for key, v in row.items() if key.endswith(" error")), default=float("nan"))
            print(f"{shape:>16} {row['dtype']:>9}  cuBLAS {row['cublas_ms']:.4f} ms  best template "
                  f"{times.get(best, float('nan')):.4f} ms ({best})  max rel. error {worst_error:.2e}  "
                  f"chosen: {row['chosen']}", flush=True)
            failed = [key for key in row if key.endswith(" failed")]
            if failed:
                print("   failed: " + "; ".join(f"{key[:-7]}: {row[key]}" for key in failed), flush=True)
            if arguments.json:
                with open(arguments.json, "a") as handle:
                    handle.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
