"""GPU benchmark: eager vs torch.compile vs tensorjit, side by side, in one process.

Takes workload names on the command line (default: all) and prints, per
workload, the median time of each side, both speedups of tensorjit, the cold
compile seconds of each compiler, and achieved bandwidth for the memory-bound
workloads as a share of the measured device-to-device copy bandwidth.
Results are also written as JSON lines to --json (one line per workload).

    python bench/gpu_bench.py                      # everything
    python bench/gpu_bench.py softmax layernorm_gelu --no-torch-compile
    python bench/gpu_bench.py --list

torch.compile is called here only as the reference to beat (allowed in bench).
One workload failing prints its error and the run continues.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import sys
import tempfile
import time
import traceback
from typing import Any, Callable

# Cold compile means cold caches: both compilers get fresh cache directories
# before anything imports them.
_CACHE_ROOT = tempfile.mkdtemp(prefix="tensorjit_bench_")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_CACHE_ROOT, "inductor"))
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_CACHE_ROOT, "triton"))
os.environ.setdefault("TENSORJIT_CACHE_DIR", os.path.join(_CACHE_ROOT, "tensorjit"))

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_models import GPT2, GPT2Settings, TinyBlock  # noqa: E402


@dataclasses.dataclass
class Workload:
    name: str
    build: Callable[[], tuple[nn.Module, list[torch.Tensor]]]
    bytes_moved: int | None = None
    """Fewest bytes the workload must move (inputs read once, outputs written once)."""
    train: bool = False
    """Time forward + backward (sum of outputs as the loss) instead of forward alone."""


class Lambda(nn.Module):
    """Wraps a function so every compiler sees an nn.Module."""

    def __init__(self, function: Callable[..., Any]):
        super().__init__()
        self.function = function

    def forward(self, x):
        return self.function(x)


def _randn(*shape, dtype):
    return torch.randn(*shape, device="cuda", dtype=dtype)


def build_softmax():
    return Lambda(lambda x: torch.softmax(x, dim=-1)), [_randn(8192, 8192, dtype=torch.bfloat16)]


class LayerNormGelu(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return F.gelu(self.norm(x))


def build_layernorm_gelu():
    model = LayerNormGelu(4096).cuda().to(torch.bfloat16)
    return model, [_randn(8192, 4096, dtype=torch.bfloat16)]


def pointwise_chain(x):
    # 50 small pointwise ops; eager pays one kernel (and one round trip to
    # memory) per op, a fusing compiler pays one.
    for step in range(10):
        x = x * 1.0001
        x = x + 0.001
        x = torch.sin(x)
        x = torch.relu(x)
        x = x - 0.0005
    return x


def build_pointwise_chain():
    return Lambda(pointwise_chain), [_randn(1024, 4096, dtype=torch.float32)]


def build_tiny_block():
    return TinyBlock().cuda().half(), [_randn(32, 128, 768, dtype=torch.float16)]


def _gpt2(train: bool):
    model = GPT2(GPT2Settings()).cuda().to(torch.bfloat16)
    model.train(train)
    tokens = torch.randint(0, model.settings.vocab_size, (8, 512), device="cuda")
    return model, [tokens]


def build_resnet50():
    import torchvision

    model = torchvision.models.resnet50().cuda().half().eval()
    return model, [_randn(64, 3, 224, 224, dtype=torch.float16)]


def _densenet(train: bool):
    import torchvision

    model = torchvision.models.densenet121().cuda().train(train)
    return model, [_randn(16, 3, 128, 128, dtype=torch.float32)]


WORKLOADS = [
    Workload("softmax", build_softmax, bytes_moved=2 * 8192 * 8192 * 2),
    Workload("layernorm_gelu", build_layernorm_gelu, bytes_moved=2 * 8192 * 4096 * 2 + 2 * 4096 * 2),
    Workload("pointwise_chain", build_pointwise_chain, bytes_moved=2 * 1024 * 4096 * 4),
    Workload("tiny_block", build_tiny_block),
    Workload("gpt2_infer", lambda: _gpt2(False)),
    Workload("gpt2_train", lambda: _gpt2(True), train=True),
    Workload("resnet50_infer", build_resnet50),
    Workload("densenet121_infer", lambda: _densenet(False)),
    Workload("densenet121_train", lambda: _densenet(True), train=True),
]


# -- compilers --------------------------------------------------------------


def tensorjit_compile(model: nn.Module, inputs: list[torch.Tensor]) -> Callable[..., Any]:
    import tensorjit

    return tensorjit.compile(model)


DIRECT = False
"""--direct: skip the capture stage (symbolic_trace, then the inductor backend)."""


def direct_compile(model: nn.Module, inputs: list[torch.Tensor]) -> Callable[..., Any]:
    from tensorjit.backends.inductor import inductor

    return inductor(torch.fx.symbolic_trace(model), list(inputs))


def reset_compilers() -> None:
    torch._dynamo.reset()
    try:
        import tensorjit

        if hasattr(tensorjit, "reset"):
            tensorjit.reset()
    except ImportError:
        pass


# -- timing -----------------------------------------------------------------


def make_step(function: Callable[..., Any], inputs: list[torch.Tensor], train: bool, model: nn.Module):
    if not train:

        @torch.no_grad()
        def step():
            return function(*inputs)

        return step

    def step():
        for parameter in model.parameters():
            parameter.grad = None
        output = function(*inputs)
        loss = _as_loss(output)
        loss.backward()
        return loss

    return step


def _as_loss(output) -> torch.Tensor:
    if isinstance(output, (tuple, list)):
        output = output[0]
    if hasattr(output, "logits"):
        output = output.logits
    return output.float().mean()


def median_ms(step: Callable[[], Any]) -> float:
    import triton.testing

    return float(triton.testing.do_bench(step, warmup=50, rep=300, return_mode="median"))


def cold_compile_seconds(step: Callable[[], Any]) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    step()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def copy_bandwidth_gbs() -> float:
    """Device-to-device copy bandwidth, counting bytes read plus bytes written."""
    import triton.testing

    source = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").random_()
    target = torch.empty_like(source)
    milliseconds = triton.testing.do_bench(lambda: target.copy_(source), warmup=50, rep=300, return_mode="median")
    return 2 * source.numel() / milliseconds / 1e6


def max_relative_error(expected, actual) -> float:
    leaves_expected = _tensors(expected)
    leaves_actual = _tensors(actual)
    if len(leaves_expected) != len(leaves_actual):
        return math.inf
    worst = 0.0
    for left, right in zip(leaves_expected, leaves_actual):
        left, right = left.double(), right.double()
        if not torch.isfinite(right).all() and torch.isfinite(left).all():
            return math.inf
        worst = max(worst, float((left - right).norm() / left.norm().clamp_min(1e-30)))
    return worst


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if hasattr(value, "logits"):
        return [value.logits]
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _tensors(item)]
    return []


# -- one workload -----------------------------------------------------------


def run_workload(workload: Workload, sides: list[str], copy_gbs: float) -> dict[str, Any]:
    torch.manual_seed(0)
    model, inputs = workload.build()
    result: dict[str, Any] = {"workload": workload.name}
    eager_step = make_step(model, inputs, workload.train, model)
    with torch.no_grad():
        reference = model(*inputs)
    steps = {"eager": eager_step}
    reset_compilers()
    for side in sides:
        try:
            steps[side] = _run_side(side, workload, model, inputs, reference, result)
        except Exception as error:  # noqa: BLE001 - report and go on
            result[f"{side}_error"] = f"{type(error).__name__}: {error}"
            traceback.print_exc()
    # Interleaved rounds: a host-bound step's time moves with the machine's load (up to 2x
    # between runs); the sides share each round's conditions, and the median round is kept.
    for round_ in range(ROUNDS):
        for side, step in steps.items():
            result.setdefault(f"{side}_ms_rounds", []).append(round(median_ms(step), 4))
    for side in steps:
        result[f"{side}_ms"] = statistics.median(result[f"{side}_ms_rounds"])
    if workload.bytes_moved:
        for side in ["eager", *sides]:
            if f"{side}_ms" in result:
                gbs = workload.bytes_moved / result[f"{side}_ms"] / 1e6
                result[f"{side}_gbs"] = gbs
                result[f"{side}_copy_pct"] = 100 * gbs / copy_gbs
    return result


def _run_side(side, workload, model, inputs, reference, result) -> Callable[[], Any]:
    start = time.perf_counter()
    if side == "torch_compile":
        compiled = torch.compile(model)
    elif DIRECT:
        compiled = direct_compile(model, inputs)
        result["tensorjit_path"] = "symbolic_trace + Triton backend (capture bypassed)"
    else:
        compiled = tensorjit_compile(model, inputs)
    step = make_step(compiled, inputs, workload.train, model)
    try:
        result[f"{side}_compile_s"] = (time.perf_counter() - start) + cold_compile_seconds(step)
    except Exception as error:  # noqa: BLE001
        if side != "tensorjit" or DIRECT:
            raise
        # Capture failed: measure the code generator through symbolic_trace instead, and say so.
        result["tensorjit_path"] = f"symbolic_trace + Triton backend (capture failed: {type(error).__name__})"
        reset_compilers()
        start = time.perf_counter()
        compiled = direct_compile(model, inputs)
        step = make_step(compiled, inputs, workload.train, model)
        result[f"{side}_compile_s"] = (time.perf_counter() - start) + cold_compile_seconds(step)
    with torch.no_grad():
        result[f"{side}_error_vs_eager"] = max_relative_error(reference, compiled(*inputs))
    if PROFILE_DIRECTORY and side == "tensorjit":
        profile(step, os.path.join(PROFILE_DIRECTORY, "profiles.txt"), workload.name)
    return step


PROFILE_DIRECTORY: str | None = None
ROUNDS = 3


def profile(step: Callable[[], Any], path: str, label: str) -> None:
    """Where tensorjit's time goes: the top kernels, and host time per step against device time."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
        start = time.perf_counter()
        for _ in range(5):
            step()
        host_ms = (time.perf_counter() - start) * 1000 / 5
        torch.cuda.synchronize()
    table = profiler.key_averages().table(sort_by="cuda_time_total", row_limit=20, max_name_column_width=60)
    with open(path, "a") as handle:
        handle.write(f"== {label}: host time per step while profiling {host_ms:.3f} ms\n{table}\n")


# -- report -----------------------------------------------------------------


def _format(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(results: list[dict[str, Any]], copy_gbs: float) -> None:
    print(f"\ndevice: {torch.cuda.get_device_name()}  torch {torch.__version__}  copy bandwidth {copy_gbs:.0f} GB/s")
    header = (
        f"{'workload':<20}{'eager ms':>10}{'tc ms':>10}{'tj ms':>10}{'tj/eager':>10}{'tj/tc':>8}"
        f"{'tc cold s':>10}{'tj cold s':>10}{'tc %copy':>9}{'tj %copy':>9}{'tj err':>9}"
    )
    print(header)
    for row in results:
        eager, tc, tj = row.get("eager_ms"), row.get("torch_compile_ms"), row.get("tensorjit_ms")
        print(
            f"{row['workload']:<20}{_format(eager, '.3f'):>10}{_format(tc, '.3f'):>10}{_format(tj, '.3f'):>10}"
            f"{_format(eager / tj if eager and tj else None, '.2f'):>10}"
            f"{_format(tc / tj if tc and tj else None, '.2f'):>8}"
            f"{_format(row.get('torch_compile_compile_s'), '.1f'):>10}{_format(row.get('tensorjit_compile_s'), '.1f'):>10}"
            f"{_format(row.get('torch_compile_copy_pct'), '.0f'):>9}{_format(row.get('tensorjit_copy_pct'), '.0f'):>9}"
            f"{_format(row.get('tensorjit_error_vs_eager'), '.1e'):>9}"
        )
        for key, value in row.items():
            if key.endswith("_error"):
                print(f"    {key}: {value[:300]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*", help="names to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list workload names and exit")
    parser.add_argument("--no-torch-compile", action="store_true")
    parser.add_argument("--no-tensorjit", action="store_true")
    parser.add_argument("--json", default=None, help="append one JSON line per workload here")
    parser.add_argument("--direct", action="store_true", help="tensorjit side without the capture stage")
    parser.add_argument("--profile", default=None, help="append torch.profiler tables of tensorjit to DIR/profiles.txt")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds per workload (median kept)")
    arguments = parser.parse_args(argv)
    names = [workload.name for workload in WORKLOADS]
    if arguments.list:
        print("\n".join(names))
        return 0
    unknown = sorted(set(arguments.workloads) - set(names))
    if unknown:
        parser.error(f"unknown workloads {unknown}; known: {names}")
    chosen = [w for w in WORKLOADS if not arguments.workloads or w.name in arguments.workloads]
    global PROFILE_DIRECTORY, DIRECT, ROUNDS
    PROFILE_DIRECTORY = arguments.profile
    ROUNDS = arguments.rounds
    DIRECT = arguments.direct
    sides = [s for s, off in (("torch_compile", arguments.no_torch_compile), ("tensorjit", arguments.no_tensorjit)) if not off]
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    copy_gbs = copy_bandwidth_gbs()
    print(f"copy bandwidth: {copy_gbs:.0f} GB/s (read + write)", flush=True)
    results = []
    for workload in chosen:
        print(f"== {workload.name}", flush=True)
        try:
            row = run_workload(workload, sides, copy_gbs)
        except Exception as error:  # noqa: BLE001
            traceback.print_exc()
            row = {"workload": workload.name, "eager_error": f"{type(error).__name__}: {error}"}
        print(json.dumps(row), flush=True)
        results.append(row)
        if arguments.json:
            with open(arguments.json, "a") as handle:
                handle.write(json.dumps({**row, "copy_gbs": copy_gbs}) + "\n")
        torch.cuda.empty_cache()
    print_table(results, copy_gbs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
