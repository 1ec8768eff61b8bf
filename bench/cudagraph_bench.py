"""Modes benchmark: eager vs torch.compile vs tensorjit under mode="reduce-overhead" (and any other mode).

Per workload, in one process: eager, torch.compile(mode="reduce-overhead"),
tensorjit.compile(mode="reduce-overhead"), and tensorjit's default mode for
reference. Inference runs under torch.inference_mode(); a training step is
forward + backward + an SGD step. Median of event-timed calls
(triton.testing.do_bench). Prints a table and writes JSON lines to --json.
tensorjit's "cudagraphs" log lines (recordings and refusals) are printed per
workload, so a missing recording shows up with its reason.

    python bench/cudagraph_bench.py                    # every workload
    python bench/cudagraph_bench.py tiny_block mlp --profile
    python bench/cudagraph_bench.py mlp --sides torch_ma,tj_ma,torch_default,tj_default
    # each side in a fresh process (cold and memory figures that no side's order moves):
    python bench/cudagraph_bench.py gpt2_train --isolate --sides torch_default,tj_default
    # max-autotune's matrix products (cuBLAS or Triton GEMM templates), against default mode:
    TENSORJIT_LOGS=autotuning python bench/cudagraph_bench.py linear_gpt2 linear_gelu_gpt2 linear_fp32 \
        hf_gpt2_infer --sides tj_default,tj_manc,torch_default,torch_manc

torch.compile is called here only as the reference to beat (allowed in bench).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

_CACHE_ROOT = tempfile.mkdtemp(prefix="tensorjit_cudagraph_bench_")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_CACHE_ROOT, "inductor"))
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_CACHE_ROOT, "triton"))
os.environ.setdefault("TENSORJIT_CACHE_DIR", os.path.join(_CACHE_ROOT, "tensorjit"))

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_models import GPT2, GPT2Settings, TinyBlock  # noqa: E402


class MLP(nn.Module):
    def __init__(self, width=1024, depth=4):
        super().__init__()
        self.layers = nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width), nn.ReLU())])

    def forward(self, x):
        return self.layers(x)


class Logits(nn.Module):
    """A transformers causal LM returning its logits tensor (the benchmark compares tensors)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids):
        return self.inner(input_ids=input_ids, use_cache=False).logits


class LinearGelu(nn.Module):
    """GPT-2's MLP input: a linear layer and its tanh GELU (the product's pointwise epilogue)."""

    def __init__(self, width=768, hidden=3072):
        super().__init__()
        self.linear = nn.Linear(width, hidden)

    def forward(self, x):
        return nn.functional.gelu(self.linear(x), approximate="tanh")


def hf_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    settings = GPT2Config(bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return Logits(GPT2LMHeadModel(settings)).cuda().to(torch.bfloat16).eval()


def _randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, device="cuda", dtype=dtype)


def build(name):
    if name == "tiny_block":
        return TinyBlock().cuda().half().eval(), [_randn(32, 128, 768, dtype=torch.float16)], False
    if name == "mlp":
        return MLP().cuda().eval(), [_randn(64, 1024)], False
    if name == "mlp_train":
        return MLP().cuda().train(), [_randn(64, 1024)], True
    if name == "gpt2_infer":
        model = GPT2(GPT2Settings()).cuda().to(torch.bfloat16).eval()
        return model, [torch.randint(0, 50257, (8, 512), device="cuda")], False
    if name == "gpt2_train":
        model = GPT2(GPT2Settings()).cuda().to(torch.bfloat16).train()
        return model, [torch.randint(0, 50257, (8, 256), device="cuda")], True
    # Matrix products (max-autotune's cuBLAS-or-template choice: sides tj_manc, torch_manc)
    if name == "linear_gpt2":  # GPT-2's MLP up-projection, 4x512 tokens
        return nn.Linear(768, 3072).cuda().to(torch.bfloat16).eval(), [_randn(2048, 768, dtype=torch.bfloat16)], False
    if name == "linear_gelu_gpt2":
        return LinearGelu().cuda().to(torch.bfloat16).eval(), [_randn(2048, 768, dtype=torch.bfloat16)], False
    if name == "linear_fp32":  # float32 under TF32 (main() allows it, as torch.compile's benchmarks do)
        return nn.Linear(768, 3072).cuda().eval(), [_randn(2048, 768)], False
    if name == "hf_gpt2_infer":  # transformers' GPT-2 small, random weights, bf16, 8x512 tokens
        return hf_gpt2(), [torch.randint(0, 50257, (8, 512), device="cuda")], False
    if name.startswith("densenet121"):
        import torchvision

        train = name.endswith("train")
        return torchvision.models.densenet121().cuda().train(train), [_randn(16, 3, 128, 128)], train
    if name == "resnet50_infer":
        import torchvision

        return torchvision.models.resnet50().cuda().half().eval(), [_randn(64, 3, 224, 224, dtype=torch.float16)], False
    raise KeyError(name)


WORKLOADS = ["tiny_block", "mlp", "mlp_train", "gpt2_infer", "gpt2_train", "resnet50_infer",
             "densenet121_infer", "densenet121_train", "linear_gpt2", "linear_gelu_gpt2", "linear_fp32", "hf_gpt2_infer"]


def make_step(function, model, inputs, train):
    if not train:
        def infer():
            with torch.inference_mode():
                return function(*inputs)
        return infer
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)

    def step():
        output = function(*inputs)
        loss = output.float().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss
    return step


SIDE_MODES = {"default": None, "ro": "reduce-overhead", "ma": "max-autotune",
              "manc": "max-autotune-no-cudagraphs"}
"""A side is "<compiler>_<mode>": torch_ro, tj_ro, tj_default, torch_ma, tj_manc, ..."""


def compiled_side(side, model):
    import tensorjit

    compiler, _, mode = side.partition("_")
    if compiler not in ("torch", "tj") or mode not in SIDE_MODES:
        raise KeyError(f"side {side!r}: want <torch|tj>_<{'|'.join(SIDE_MODES)}>")
    compile_function = torch.compile if compiler == "torch" else tensorjit.compile
    return compile_function(model, mode=SIDE_MODES[mode])


def median_ms(step):
    import triton.testing

    return float(triton.testing.do_bench(step, warmup=25, rep=200, return_mode="median"))


def gpu_ms(step, steps=5, label=None):
    """Device time per step (sum of kernel times under torch.profiler): what is left once the host is
    off the path. With KERNELS set, the top kernels of `label` are appended to that file."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    kernels = [event for event in profiler.key_averages() if event.device_type == torch.autograd.DeviceType.CUDA]
    total_us = sum(event.self_device_time_total for event in kernels)
    if KERNELS and label:
        kernels.sort(key=lambda event: -event.self_device_time_total)
        lines = [f"{event.self_device_time_total / steps / 1000:8.3f} ms {event.count // steps:5d}x {event.key[:100]}"
                 for event in kernels]
        count = sum(event.count for event in kernels) // steps
        with open(KERNELS, "a") as handle:
            handle.write(f"== {label}: {total_us / steps / 1000:.3f} ms, {count} kernels per step\n"
                         + "\n".join(lines) + "\n\n")
    return total_us / steps / 1000


KERNELS: str | None = None


PROFILE = False
HOST_PROFILE: str | None = None
COLD_PROFILE: str | None = None


def cold_profile(step, label):
    """Where the first (compiling) step's host time goes (cProfile, cumulative), and the code
    generator's own timings, appended to COLD_PROFILE."""
    import cProfile
    import io
    import pstats

    from tensorjit.codegen import report

    profiler = cProfile.Profile()
    profiler.enable()
    step()
    torch.cuda.synchronize()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(45)
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
    with open(COLD_PROFILE, "a") as handle:
        handle.write(f"== {label}: first step\n{text.getvalue()}\n{report.timing_report()}\n")


def host_profile(step, label, calls=20):
    """Top host functions by own time over `calls` steps (cProfile), appended to HOST_PROFILE."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    torch.cuda.synchronize()
    profiler.enable()
    for _ in range(calls):
        step()
    profiler.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(14)
    with open(HOST_PROFILE, "a") as handle:
        handle.write(f"== {label} ({calls} steps)\n{text.getvalue()}\n")


def run(name, sides):
    import tensorjit
    from tensorjit import logs

    torch.manual_seed(0)
    model, inputs, train = build(name)
    row = {"workload": name, "train": train}
    with torch.inference_mode():
        reference = None if train else model(*inputs).float()
    row["eager_ms"] = median_ms(make_step(model, model, inputs, train))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for side in sides:
        model.load_state_dict(state)
        logs.clear()
        try:
            result = compiled = step = None
            torch._dynamo.reset()  # the previous side's graphs and pools go before this side's base
            tensorjit.reset()
            gc.collect()
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            base = torch.cuda.memory_allocated()
            base_reserved = torch.cuda.memory_reserved()
            start = time.perf_counter()
            compiled = compiled_side(side, model)
            step = make_step(compiled, model, inputs, train)
            if COLD_PROFILE and side.startswith("tj"):
                cold_profile(step, f"{name} {side}")
            for _ in range(3):  # compile, warm up, record
                result = step()
            torch.cuda.synchronize()
            row[f"{side}_cold_s"] = round(time.perf_counter() - start, 2)
            if reference is not None:
                output = result.float()
                row[f"{side}_rel_err"] = float((output - reference).norm() / reference.norm())
                output = None  # else the next side's memory base, or this side's peak, holds it
            row[f"{side}_ms"] = median_ms(step)
            result = None
            gc.collect()
            torch.cuda.reset_peak_memory_stats()  # resets the reserved peak too
            step()
            step()
            torch.cuda.synchronize()
            # Memory this side holds or allocates in a step beyond what was allocated before it
            # compiled (the model, the inputs): activations, workspaces, CUDA graph pools.
            row[f"{side}_peak_mb"] = round((torch.cuda.max_memory_allocated() - base) / 2**20, 1)
            # Reserved: what the allocator holds from the device, CUDA graph pools whole (torch's
            # cudagraph trees hand their pool's blocks back to the allocator's books as free).
            row[f"{side}_peak_reserved_mb"] = round((torch.cuda.max_memory_reserved() - base_reserved) / 2**20, 1)
            if PROFILE:
                row[f"{side}_gpu_ms"] = round(gpu_ms(step, label=f"{name} {side}"), 3)
            if HOST_PROFILE and side.startswith("tj"):
                host_profile(step, f"{name} {side}")
        except Exception as error:  # noqa: BLE001 - report and go on
            row[f"{side}_error"] = f"{type(error).__name__}: {str(error)[:300]}"
            traceback.print_exc()
        if side.startswith("tj"):
            lines = logs.recent("cudagraphs")
            row[f"{side}_recorded"] = sum("recorded a CUDA graph" in line for line in lines)
            row[f"{side}_refusals"] = sorted({line for line in lines if "not replayed" in line})[:6]
            choices = [line for line in logs.recent("autotuning") if "(timed" in line or "(remembered" in line]
            if choices:  # max-autotune: which products went to cuBLAS ("extern") or a template
                row[f"{side}_gemm_choices"] = [line.split(" (")[0] for line in choices][:12]
    return row


def run_isolated(name, sides, arguments):
    """One workload, each side in a fresh process with fresh kernel caches (Triton's, torch.compile's,
    tensorjit's), as a user's first run: in one process a side's cold start pays or skips what an
    earlier side imported, and its memory figures see what an earlier side left cached. tensorjit's
    native extension is built once, here, and copied into each side's cache, as on a machine where
    it was built at a first use (its build is not a compile of the model)."""
    row = {}
    for side in sides:
        fresh = tempfile.mkdtemp(prefix=f"tensorjit_bench_{side}_")
        environment = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(fresh, "inductor"),
                           TRITON_CACHE_DIR=os.path.join(fresh, "triton"),
                           TENSORJIT_CACHE_DIR=os.path.join(fresh, "tensorjit"))
        if os.path.isdir(os.environ["TENSORJIT_CACHE_DIR"]):
            shutil.copytree(os.environ["TENSORJIT_CACHE_DIR"], environment["TENSORJIT_CACHE_DIR"])
        output = os.path.join(fresh, "row.json")
        command = [sys.executable, os.path.abspath(__file__), name, "--sides", side, "--json", output]
        command += ["--profile"] * arguments.profile
        for flag in ("kernels", "host_profile", "cold_profile"):  # files each side's process appends to
            if getattr(arguments, flag):
                command += [f"--{flag.replace('_', '-')}", getattr(arguments, flag)]
        subprocess.run(command, env=environment, check=False)
        try:
            with open(output) as handle:
                child = json.loads(handle.read().splitlines()[-1])
        except (OSError, IndexError, ValueError):
            child = {f"{side}_error": "the side's process wrote no row (its output is above)"}
        row.update({key: value for key, value in child.items() if key not in row})
        shutil.rmtree(fresh, ignore_errors=True)
    row.setdefault("workload", name)
    return row


def warm_native_extension():
    """Build (or load from the disk cache) tensorjit's native extension before timing anything: in a
    fresh cache its build runs in the background during the first minute, and what it serves
    (tensor guards in C++, gradients handed out of CUDA graph pools) arrives mid-measurement."""
    import tensorjit
    from tensorjit.capture import native_guards

    start = time.perf_counter()
    ready = native_guards.checker(tensorjit.config.config, wait=True) is not None
    print(f"tensorjit native extension: {'ready' if ready else 'unavailable'} "
          f"({time.perf_counter() - start:.1f} s)", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*")
    parser.add_argument("--sides", default="torch_ro,tj_ro,tj_default")
    parser.add_argument("--json", default=None)
    parser.add_argument("--isolate", action="store_true", help="each side in a fresh process (fresh caches)")
    parser.add_argument("--profile", action="store_true", help="also record device time per step (torch.profiler)")
    parser.add_argument("--host-profile", default=None, help="append cProfile tables of tensorjit's steps to this file")
    parser.add_argument("--kernels", default=None, help="with --profile: append each side's top kernels here")
    parser.add_argument("--cold-profile", default=None, help="append cProfile tables of tensorjit's first step here")
    arguments = parser.parse_args(argv)
    global PROFILE, HOST_PROFILE, COLD_PROFILE, KERNELS
    KERNELS = arguments.kernels
    PROFILE = arguments.profile
    HOST_PROFILE = arguments.host_profile
    COLD_PROFILE = arguments.cold_profile
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    sides = arguments.sides.split(",")
    if any(side.startswith("tj") for side in sides):
        warm_native_extension()
    rows = []
    for name in arguments.workloads or WORKLOADS:
        print(f"== {name}", flush=True)
        try:
            row = run_isolated(name, sides, arguments) if arguments.isolate else run(name, sides)
        except Exception as error:  # noqa: BLE001
            traceback.print_exc()
            row = {"workload": name, "error": f"{type(error).__name__}: {error}"}
        print(json.dumps(row), flush=True)
        rows.append(row)
        if arguments.json:
            with open(arguments.json, "a") as handle:
                handle.write(json.dumps(row) + "\n")
        torch.cuda.empty_cache()
    print(f"\n{torch.cuda.get_device_name()}  torch {torch.__version__}")
    pairs = [mode for mode in SIDE_MODES if f"torch_{mode}" in sides and f"tj_{mode}" in sides]
    print(f"{'workload':<20}{'eager':>9}" + "".join(f"{s:>12}" for s in sides)
          + "".join(f"{'tj/torch ' + mode:>16}" for mode in pairs))
    for row in rows:
        cells = "".join(f"{row.get(f'{s}_ms', float('nan')):>12.3f}" for s in sides)
        ratios = "".join(f"{row.get(f'torch_{m}_ms', float('nan')) / row.get(f'tj_{m}_ms', float('nan')):>16.2f}"
                         for m in pairs)
        print(f"{row['workload']:<20}{row.get('eager_ms', float('nan')):>9.3f}{cells}{ratios}")

if __name__ == "__main__":
    main()
