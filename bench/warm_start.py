"""First-call time in fresh processes: eager, torch.compile (warm) and tensorjit (cold, then warm).

    python bench/warm_start.py [--repeats 3] [--workloads gpt2,resnet18,train]

Each measurement is its own Python process. The clock starts after torch, the model and its
inputs are ready (and before `import tensorjit`, which the tensorjit runs pay) and stops when
the first call has returned (for "train": forward, backward and an SGD step). Per repeat:

- eager: the model's first call;
- torch.compile: one process fills a fresh TORCHINDUCTOR_CACHE_DIR (FX graph and AOTAutograd
  caches), a second one is timed (torch.compile's warm start: Dynamo traces again);
- tensorjit: one process with a fresh TENSORJIT_CACHE_DIR is timed (cold: capture, autograd,
  codegen, g++), a second one with the same directory is timed (warm: saved entries, nothing compiled).

Every compiled run checks its outputs (and, for "train", the updated weights) against eager.
Workloads: "gpt2" (2-layer GPT-2, n_embd 64, 1x32 tokens, inference), "resnet18"
(bench/cpu_models.py, 1x3x64x64, inference), "train" (the GPT-2 above: loss, backward, SGD).
Prints one line per run and tables of medians and minimums. torch.compile is only the reference here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "src"
PYCACHE = os.path.join(tempfile.gettempdir(), "tensorjit-bench-pycache")


class Logits(torch.nn.Module):
    """A language model's logits alone (what "gpt2" compiles)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, ids):
        return self.inner(ids).logits


class Loss(torch.nn.Module):
    """A language model's loss on its own tokens (what "train" compiles; the step runs around it)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, ids):
        return self.inner(ids, labels=ids).loss


def build(workload: str):
    """(model, inputs) for a workload, seeded: every process builds the same weights."""
    torch.manual_seed(0)
    if workload == "resnet18":
        sys.path.insert(0, str(HERE))
        from cpu_models import ResNet18
        return ResNet18().eval(), (torch.randn(1, 3, 64, 64),)
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=512, n_positions=64, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
                        attn_implementation="eager")
    model = GPT2LMHeadModel(config)
    ids = torch.randint(0, 512, (1, 32))
    if workload == "gpt2":
        return Logits(model.eval()), (ids,)
    return Loss(model), (ids,)


def first_call(workload: str, compiler: str) -> dict:
    """In a child process: time compile + the first call; compare with eager."""
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    model, inputs = build(workload)
    reference, _ = build(workload)
    profile = None
    if os.environ.get("WARM_BENCH_PROFILE"):  # a cProfile of the timed part, to that file
        import cProfile
        profile = cProfile.Profile()
        profile.enable()
    start = time.perf_counter()
    if compiler == "tensorjit":
        import tensorjit
        compiled = tensorjit.compile(model)
    elif compiler == "torch.compile":
        compiled = torch.compile(model)
    else:
        compiled = model
    if workload == "train":
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loss = compiled(*inputs)
        loss.backward()
        optimizer.step()
        seconds = time.perf_counter() - start
        expected = reference(*inputs)
        expected.backward()
        torch.optim.SGD(reference.parameters(), lr=0.1).step()
        ok = torch.allclose(loss, expected, atol=1e-4) and all(
            torch.allclose(a, b, atol=1e-4) for a, b in zip(model.parameters(), reference.parameters()))
    else:
        with torch.no_grad():
            out = compiled(*inputs)
            seconds = time.perf_counter() - start
            ok = torch.allclose(out, reference(*inputs), atol=1e-4)
    if profile is not None:
        profile.disable()
        profile.dump_stats(os.environ["WARM_BENCH_PROFILE"])
    result = {"seconds": seconds, "ok": bool(ok)}
    if compiler == "tensorjit":
        from tensorjit import logs, progress
        result["compiled"] = dict(progress.stage_counts)
        result["cache"] = [line.split(":")[0] for line in logs.recent("cache")]
    return result


def _child(workload: str, compiler: str, env: dict) -> dict:
    # Modules' bytecode cached as an installed package has it (this machine sets PYTHONDONTWRITEBYTECODE;
    # every process would compile tensorjit's and torch._dynamo's sources again).
    environment = {**os.environ, "PYTHONPATH": str(SOURCE), "PYTHONPYCACHEPREFIX": PYCACHE, **env}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    result = subprocess.run([sys.executable, __file__, "--child", workload, compiler], capture_output=True,
                            text=True, env=environment, timeout=1800)
    if result.returncode != 0:
        raise RuntimeError(f"{workload} {compiler} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def measure(workload: str, repeats: int) -> dict[str, list[float]]:
    runs: dict[str, list[float]] = {"eager": [], "torch.compile warm": [], "tensorjit cold": [], "tensorjit warm": []}
    for repeat in range(repeats):
        with tempfile.TemporaryDirectory(prefix="warm-bench-") as scratch:
            torch_cache = {"TORCHINDUCTOR_CACHE_DIR": f"{scratch}/inductor", "TRITON_CACHE_DIR": f"{scratch}/triton"}
            ours = {"TENSORJIT_CACHE_DIR": f"{scratch}/tensorjit"}
            timed = [("eager", "eager", {}), (None, "torch.compile", torch_cache),
                     ("torch.compile warm", "torch.compile", torch_cache),
                     ("tensorjit cold", "tensorjit", ours), ("tensorjit warm", "tensorjit", ours)]
            for label, compiler, env in timed:
                result = _child(workload, compiler, env)
                if not result["ok"]:
                    raise AssertionError(f"{workload} {compiler}: output differs from eager")
                print(f"{workload:9} repeat {repeat} {label or 'torch.compile cold (fills its cache)':38} "
                      f"{result['seconds']:8.3f} s {result.get('compiled', '')} {result.get('cache', '')}",
                      flush=True)
                if label is not None:
                    runs[label].append(result["seconds"])
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workloads", default="gpt2,resnet18,train")
    parser.add_argument("--child", nargs=2, metavar=("WORKLOAD", "COMPILER"), help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        print(json.dumps(first_call(*arguments.child)))
        return
    table = {w: measure(w, arguments.repeats) for w in arguments.workloads.split(",")}
    # On a shared machine the minimum is the run least disturbed by other jobs; the median is the typical one.
    for title, pick in (("median", statistics.median), ("minimum", min)):
        print(f"\n{title} first-call seconds over {arguments.repeats} repeats (fresh processes)")
        print("| workload | eager | torch.compile warm | tensorjit cold | tensorjit warm | warm / cold |")
        print("| --- | --- | --- | --- | --- | --- |")
        for workload, runs in table.items():
            value = {k: pick(v) for k, v in runs.items()}
            print(f"| {workload} | {value['eager']:.3f} | {value['torch.compile warm']:.3f} | "
                  f"{value['tensorjit cold']:.3f} | {value['tensorjit warm']:.3f} | "
                  f"{100 * value['tensorjit warm'] / value['tensorjit cold']:.1f}% |")


if __name__ == "__main__":
    main()
