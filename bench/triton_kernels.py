"""Hand-built kernels through tensorjit's Triton kernel builder, timed against copy bandwidth.

Checks, on a GPU, what the emitter's block-size rules give for the memory-bound
workloads (softmax 8192x8192 bf16, layer norm + GELU 8192x4096 bf16, a long
pointwise chain) over a sweep of warps and rows per program, and the launch
overhead of KernelLauncher's direct path against Triton's generic launch.
Prints one line per variant; no torch.compile involved.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
import time

import torch
import triton.testing

from tensorjit.codegen.triton import heuristics
from tensorjit.codegen.triton.kernel import TritonKernel
from tensorjit.codegen.triton.launcher import KernelLauncher, load_kernel

CACHE = tempfile.mkdtemp()


def build_softmax(rows, columns, shape, dtype):
    kernel = TritonKernel("softmax_kernel", rows, columns, shape)
    index = f"rindex + {columns} * xindex"
    x = kernel.load("x", index, dtype)
    maximum = kernel.reduction("max", x, dtype)
    kernel.begin_loop()
    exponent = kernel.compute(f"tl.exp({kernel.load('x', index, dtype)} - {maximum})")
    total = kernel.reduction("sum", exponent, dtype)
    kernel.begin_loop()
    exponent = kernel.compute(f"tl.exp({kernel.load('x', index, dtype)} - {maximum})")
    kernel.store("out", index, kernel.compute(f"{exponent} / {total}"), dtype)
    return kernel


def build_layernorm_gelu(rows, columns, shape, dtype, activation="erf"):
    kernel = TritonKernel("layernorm_gelu_kernel", rows, columns, shape)
    index = f"rindex + {columns} * xindex"
    x = kernel.load("x", index, dtype)
    mean = kernel.compute(f"{kernel.reduction('sum', x, dtype)} / {float(columns)}")
    kernel.begin_loop()
    centered = kernel.compute(f"{kernel.load('x', index, dtype)} - {mean}")
    variance = kernel.compute(f"{kernel.reduction('sum', kernel.compute(f'{centered} * {centered}'), dtype)} / {float(columns)}")
    rstd = kernel.compute(f"tl.rsqrt({variance} + 1e-5)")
    kernel.begin_loop()
    centered = kernel.compute(f"{kernel.load('x', index, dtype)} - {mean}")
    weight = kernel.load("weight", "rindex", dtype)
    bias = kernel.load("bias", "rindex", dtype)
    y = kernel.compute(f"{centered} * {rstd} * {weight} + {bias}")
    if activation == "erf":
        gelu = kernel.compute(f"0.5 * {y} * (1.0 + tl.erf({y} * 0.7071067811865476))")
    elif activation == "none":  # diagnosis only: how much of the time is GELU's arithmetic
        gelu = y
    else:  # diagnosis only: the tanh approximation, for its instruction count
        gelu = kernel.compute(f"0.5 * {y} * (1.0 + libdevice.tanh(0.7978845608 * ({y} + 0.044715 * {y} * {y} * {y})))")
    kernel.store("out", index, gelu, dtype)
    return kernel


def build_chain(numel, shape, sine=True):
    kernel = TritonKernel("chain_kernel", numel, None, shape)
    x = kernel.load("x", "xindex", torch.float32)
    for _ in range(10):
        x = kernel.compute(f"{x} * 1.0001")
        x = kernel.compute(f"{x} + 0.001")
        x = kernel.compute(f"tl.sin({x})" if sine else f"{x} * 0.999")
        x = kernel.compute(f"tl.where({x} < 0, 0, {x})")
        x = kernel.compute(f"{x} - 0.0005")
    kernel.store("out", "xindex", x, torch.float32)
    return kernel


def time_ms(function) -> float:
    return float(triton.testing.do_bench(function, warmup=50, rep=300, return_mode="median"))


def run_variant(label, kernel, shape, arguments, bytes_moved, reference, copy_gbs):
    function = load_kernel(kernel.source(), kernel.name, CACHE)
    launcher = KernelLauncher(function, shape)
    output = arguments[-1]
    output.fill_(float("nan"))
    start = time.perf_counter()
    launcher(*arguments)
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - start
    error = ((output.double() - reference.double()).norm() / reference.double().norm()).item()
    milliseconds = time_ms(lambda: launcher(*arguments))
    gbs = bytes_moved / milliseconds / 1e6
    print(f"{label:<48} {milliseconds:8.4f} ms {gbs:7.0f} GB/s {100 * gbs / copy_gbs:5.1f}% copy  "
          f"err {error:.1e}  compile {compile_s:.2f} s", flush=True)


def copy_bandwidth() -> float:
    source = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").random_()
    target = torch.empty_like(source)
    return 2 * source.numel() / time_ms(lambda: target.copy_(source)) / 1e6


def sweep_reductions(copy_gbs):
    dtype = torch.bfloat16
    x = torch.randn(8192, 8192, device="cuda", dtype=dtype)
    out = torch.empty_like(x)
    reference = torch.softmax(x.float(), -1)
    print(f"eager softmax: {time_ms(lambda: torch.softmax(x, -1)):.4f} ms")
    for xblock, warps in ((1, 4), (1, 8), (1, 16), (1, 32), (2, 16), (4, 32)):
        shape = dataclasses.replace(heuristics.persistent_reduction_shape(8192, 8192),
                                    xblock=xblock, num_warps=warps, grid=(8192 // xblock, 1, 1))
        run_variant(f"softmax persistent X{xblock} w{warps}", build_softmax(8192, 8192, shape, dtype),
                    shape, (x, out), 4 * x.numel(), reference, copy_gbs)
    for warps, per_sm, stages in ((16, 1, 2), (8, 2, 2), (16, 2, 1)):
        programs = 132 * per_sm
        shape = dataclasses.replace(heuristics.persistent_reduction_shape(8192, 8192), num_warps=warps,
                                    programs=programs, num_stages=stages, grid=(programs, 1, 1))
        run_variant(f"softmax grid-stride {per_sm}/SM w{warps} stages{stages}", build_softmax(8192, 8192, shape, dtype),
                    shape, (x, out), 4 * x.numel(), reference, copy_gbs)
    for shape in heuristics.looped_reduction_configs(8192, 8192):
        run_variant(f"softmax looped X{shape.xblock} R{shape.rblock} w{shape.num_warps}",
                    build_softmax(8192, 8192, shape, dtype), shape, (x, out), 4 * x.numel(), reference, copy_gbs)
    x = torch.randn(8192, 4096, device="cuda", dtype=dtype)
    weight = torch.randn(4096, device="cuda", dtype=dtype)
    bias = torch.randn(4096, device="cuda", dtype=dtype)
    out = torch.empty_like(x)
    reference = torch.nn.functional.gelu(torch.nn.functional.layer_norm(x.float(), (4096,), weight.float(), bias.float()))
    for xblock, warps in ((1, 4), (1, 8), (1, 16), (2, 8), (4, 16)):
        shape = dataclasses.replace(heuristics.persistent_reduction_shape(8192, 4096),
                                    xblock=xblock, num_warps=warps, grid=(8192 // xblock, 1, 1))
        run_variant(f"layernorm_gelu persistent X{xblock} w{warps}", build_layernorm_gelu(8192, 4096, shape, dtype),
                    shape, (x, weight, bias, out), 4 * x.numel(), reference, copy_gbs)
    for warps, per_sm, stages in ((4, 4, 1), (4, 4, 2), (4, 8, 2), (8, 2, 2), (8, 4, 3)):
        programs = 132 * per_sm
        shape = dataclasses.replace(heuristics.persistent_reduction_shape(8192, 4096), num_warps=warps,
                                    programs=programs, num_stages=stages, grid=(programs, 1, 1))
        run_variant(f"layernorm_gelu grid-stride {per_sm}/SM w{warps} stages{stages}",
                    build_layernorm_gelu(8192, 4096, shape, dtype), shape, (x, weight, bias, out), 4 * x.numel(),
                    reference, copy_gbs)
    shape = dataclasses.replace(heuristics.persistent_reduction_shape(8192, 4096), num_warps=4)
    layer_norm = torch.nn.functional.layer_norm(x.float(), (4096,), weight.float(), bias.float())
    run_variant("diagnosis: layernorm alone X1 w4", build_layernorm_gelu(8192, 4096, shape, dtype, "none"),
                shape, (x, weight, bias, out), 4 * x.numel(), layer_norm, copy_gbs)
    run_variant("diagnosis: layernorm + tanh-gelu X1 w4", build_layernorm_gelu(8192, 4096, shape, dtype, "tanh"),
                shape, (x, weight, bias, out), 4 * x.numel(), reference, copy_gbs)
    for shape in heuristics.looped_reduction_configs(8192, 4096)[:2]:
        run_variant(f"layernorm_gelu looped X{shape.xblock} R{shape.rblock} w{shape.num_warps}",
                    build_layernorm_gelu(8192, 4096, shape, dtype), shape, (x, weight, bias, out), 4 * x.numel(),
                    reference, copy_gbs)


def sweep_pointwise(copy_gbs):
    x = torch.randn(1024 * 4096, device="cuda")
    out = torch.empty_like(x)
    reference = x
    for _ in range(10):
        reference = torch.relu(torch.sin(reference * 1.0001 + 0.001)) - 0.0005
    for block, warps in ((1024, 4), (2048, 8), (4096, 8), (1024, 8)):
        shape = heuristics.LaunchShape(block, None, warps, (x.numel() // block, 1, 1))
        run_variant(f"chain50 X{block} w{warps}", build_chain(x.numel(), shape), shape, (x, out),
                    8 * x.numel(), reference, copy_gbs)
    for per_sm, warps, stages in ((4, 4, 1), (8, 4, 2), (4, 8, 2)):
        shape = heuristics.LaunchShape(1024, None, warps, (132 * per_sm, 1, 1), num_stages=stages, programs=132 * per_sm)
        run_variant(f"chain50 grid-stride X1024 {per_sm}/SM w{warps} stages{stages}", build_chain(x.numel(), shape),
                    shape, (x, out), 8 * x.numel(), reference, copy_gbs)
    print(f"eager sin alone on the tensor: {time_ms(lambda: torch.sin(x, out=out)):.4f} ms")


def launch_overhead():
    shape = heuristics.pointwise_shape(1024)
    kernel = build_chain(1024, shape)
    function = load_kernel(kernel.source(), kernel.name, CACHE)
    x = torch.randn(1024, device="cuda")
    out = torch.empty_like(x)
    launcher = KernelLauncher(function, shape)
    launcher(x, out)
    function[shape.grid](x, out, XBLOCK=shape.xblock, num_warps=shape.num_warps)  # compile outside the timing
    for label, call in (
        ("generic kernel[grid](...)", lambda: function[shape.grid](x, out, XBLOCK=shape.xblock, num_warps=shape.num_warps)),
        ("KernelLauncher direct run", lambda: launcher(x, out)),
    ):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(2000):
            call()
        torch.cuda.synchronize()
        print(f"launch overhead, {label:<28} {1e6 * (time.perf_counter() - start) / 2000:6.1f} us/call")
    print(f"fast launches {launcher.fast_launches}, slow {launcher.slow_launches}")


def main():
    copy_gbs = copy_bandwidth()
    print(f"copy bandwidth {copy_gbs:.0f} GB/s  {torch.cuda.get_device_name()}  triton {triton.__version__}")
    for step in (launch_overhead, lambda: sweep_reductions(copy_gbs), lambda: sweep_pointwise(copy_gbs)):
        try:
            step()
        except Exception as error:  # noqa: BLE001
            import traceback

            traceback.print_exc()
            print(f"FAILED: {error}", file=sys.stderr)


if __name__ == "__main__":
    main()
