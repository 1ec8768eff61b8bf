"""A model's first compiled call on the CPU, by phase: where tensorjit's own compile pipeline spends time.

    python bench/cold_compile.py [--clock cpu|wall] [--repeats 3] [--workloads hf_gpt2,resnet18] [--profile FILE] [--sources A,B]

Each run is a fresh Python process (so torch's lazy imports are paid as in a real first call).
All runs of a workload share one TENSORJIT_CACHE_DIR with warm starts off (TENSORJIT_WARM_START=0):
a first, untimed run fills it with the compiled C++ libraries and the native guard extension, so
the timed runs capture, trace, lower, schedule and emit everything again but load each library
from the disk instead of running g++ (the GPU's Triton compiles are not part of this bench; what
is measured is the host-side pipeline both devices share).

Phases (CPU seconds of the first call, from `tensorjit.progress`'s stages and the code generator's
`report.TIMINGS`; COLD_COMPILE_CLOCK=wall times them in wall seconds: on a machine shared with
other work, wall time measures the others' load more than this process):
- capture: bytecode interpretation, guards, everything before the backend;
- autograd: tracing the captured graph to ATen (fake outputs, make_fx with decompositions,
  functionalization), partitioning;
- codegen: lowering, scheduling, emitting (`lowering`, `emit` inside it); `load` is the C++
  libraries' loading from the cache;
- first_call: the whole first call, as the user sees it; first_call_cpu: the CPU seconds this
  process spent in it (user and system, every thread): steadier than wall time on a machine
  shared with other work.

Workloads (float32, inference under torch.inference_mode(), random weights):
"hf_gpt2" (transformers' GPT2LMHeadModel built from GPT2Config(): GPT-2 small, 1x128 tokens),
"resnet18" (bench/cpu_models.py, 1x3x64x64), "mobilenet" (MobileNetV3-small, 1x3x64x64),
"hf_gpt2_train" (the GPT-2 above returning its loss, forward and backward, 1x64 tokens).
Prints one line per run and the median of each phase. `--sources old/src,src` compares two
checkouts (`git archive COMMIT src | tar -x -C old`), alternating their runs. `--profile FILE` writes the cProfile of
one more run's first call (cumulative and own time) to FILE.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "src"
PHASES = ("first_call", "first_call_cpu", "capture", "autograd", "codegen", "lowering", "emit", "load")


def _build(name: str):
    sys.path.insert(0, str(HERE))
    torch.manual_seed(0)
    if name.startswith("hf_gpt2"):
        from transformers import GPT2Config, GPT2LMHeadModel

        settings = GPT2Config(bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        inner = GPT2LMHeadModel(settings)
        if name == "hf_gpt2_train":
            return Loss(inner).train(), [torch.randint(0, 50257, (1, 64))], True
        return Logits(inner).eval(), [torch.randint(0, 50257, (1, 128))], False
    if name == "resnet18":
        from cpu_models import ResNet18

        return ResNet18().eval(), [torch.randn(1, 3, 64, 64)], False
    if name == "mobilenet":
        from cpu_models import MobileNetV3Small

        return MobileNetV3Small().eval(), [torch.randn(1, 3, 64, 64)], False
    raise KeyError(name)


class Logits(torch.nn.Module):
    """A causal LM's logits tensor alone."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids):
        return self.inner(input_ids=input_ids, use_cache=False).logits


class Loss(torch.nn.Module):
    """A causal LM's loss on its own tokens."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids):
        return self.inner(input_ids=input_ids, labels=input_ids, use_cache=False).loss


def child(name: str, profile: str | None, fill: bool = False) -> None:
    """One run: build, compile, time the first call by phase; prints one JSON line. fill: the
    untimed first run, which also waits for the native guard check's build (a background
    thread that a process leaving at once abandons: every timed run would then start it again,
    g++ beside the compile, and check its guards in Python)."""
    import time

    wall = time.perf_counter
    if os.environ.get("COLD_COMPILE_CLOCK", "cpu") == "cpu":
        time.perf_counter = time.process_time  # every phase timer (progress, report) counts CPU seconds
    model, inputs, train = _build(name)
    with torch.inference_mode():
        model(*inputs) if not train else None
    import tensorjit
    from tensorjit import progress
    from tensorjit.codegen import report

    stages: dict[str, float] = {}
    original_stop = progress._Printer.stop

    def stop(self, thread_id):  # every compile's stage seconds, drawn or not
        job = self.active.get(thread_id)
        if job is not None:
            job.switch(job.stages)
            for stage, seconds in job.seconds.items():
                stages[stage] = stages.get(stage, 0.0) + seconds
        return original_stop(self, thread_id)
    progress._Printer.stop = stop
    progress.wanted = lambda setting, stream: True  # a Job for every compile; nothing is drawn under 2 s
    progress.DELAY_SECONDS = 1e9

    from tensorjit.codegen.cpp import compiler

    load_seconds = [0.0]
    original_load = compiler.load_library

    def load_library(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original_load(*args, **kwargs)
        finally:
            load_seconds[0] += time.perf_counter() - start
    compiler.load_library = load_library
    import tensorjit.codegen.cpp.compile as cpp_compile

    cpp_compile.load_library = load_library

    compiled = tensorjit.compile(model)

    def step():
        if train:
            compiled(*inputs).backward()
        else:
            with torch.inference_mode():
                compiled(*inputs)
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    start, start_cpu = wall(), time.process_time()
    step()
    first, first_cpu = wall() - start, time.process_time() - start_cpu
    if fill:
        from tensorjit.capture import native_guards
        from tensorjit.config import config

        native_guards.checker(config, wait=True)
    if profiler is not None:
        import io
        import pstats

        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(250)
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(50)
        Path(profile).write_text(text.getvalue())
    timings: dict[str, float] = {}
    for _, stage, seconds in report.TIMINGS:
        timings[stage] = timings.get(stage, 0.0) + seconds
    row = {"first_call": first, "first_call_cpu": first_cpu, **stages, **{f"t_{k}": v for k, v in timings.items()}, "lowering": timings.get("lowering", 0.0),
           "emit": timings.get("emit", 0.0), "load": load_seconds[0]}
    print("RESULT " + json.dumps(row))


def _run(name: str, cache: str, profile: str | None = None, source: str = str(SOURCE), fill: bool = False) -> dict:
    environment = dict(os.environ, TENSORJIT_CACHE_DIR=cache, TENSORJIT_WARM_START="0",
                       PYTHONPATH=source, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    command = [sys.executable, __file__, "--child", name] + (["--profile", profile] if profile else []) + \
        (["--fill"] if fill else [])
    done = subprocess.run(command, env=environment, capture_output=True, text=True, check=False)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{name}: no result\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu", help="what the phases count")
    parser.add_argument("--workloads", default="hf_gpt2,resnet18")
    parser.add_argument("--profile", default=None, help="write one more run's cProfile here (per workload: FILE.name)")
    parser.add_argument("--sources", default=str(SOURCE),
                        help="comma-separated src/ directories to compare (e.g. an older commit's, from git archive): "
                             "their runs alternate, so that both see the same load")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--fill", action="store_true", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        child(arguments.child, arguments.profile, arguments.fill)
        return
    os.environ["COLD_COMPILE_CLOCK"] = arguments.clock
    sources = arguments.sources.split(",")
    for name in arguments.workloads.split(","):
        with tempfile.TemporaryDirectory(prefix="tensorjit-cold-") as cache:
            for source in sources:  # fills the library cache (g++) and builds the native guards
                _run(name, cache, source=source, fill=True)
            rows: dict[str, list] = {source: [] for source in sources}
            for repeat in range(arguments.repeats):
                for number, source in enumerate(sources):
                    row = _run(name, cache, source=source)
                    rows[source].append(row)
                    print(name, f"source{number}", repeat, " ".join(f"{k} {row.get(k, 0.0):.2f}" for k in PHASES),
                          flush=True)
            for number, source in enumerate(sources):
                medians = {k: statistics.median(r.get(k, 0.0) for r in rows[source]) for k in PHASES}
                print(f"{name} source{number} ({source}) median " + " ".join(f"{k} {v:.2f}" for k, v in medians.items()),
                      flush=True)
            if arguments.profile:
                _run(name, cache, f"{arguments.profile}.{name}")

if __name__ == "__main__":
    main()
