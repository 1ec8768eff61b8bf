"""CPU benchmark (issue 5): eager vs torch.compile vs tensorjit.compile, one table.

Each (workload, system) pair runs in a fresh subprocess with empty cache
directories (TORCHINDUCTOR_CACHE_DIR, TENSORJIT_CACHE_DIR, and
TORCHINDUCTOR_FX_GRAPH_CACHE=0), so the first call is a truly cold compile:

    python bench/cpu_bench.py --worker <workload> <system>   # prints one JSON line

The parent runs every pair and prints a markdown table: median milliseconds of
--runs timed calls (after 3 warm-up calls), both speedups of tensorjit, cold
compile seconds (compile call + first call, capture included), and GB/s for the
memory-bound rows (bytes read once + written once, divided by the median time).
tensorjit's output is checked against eager with torch.testing.assert_close
(loose tolerance); a failure prints MISMATCH.

    PYTHONPATH=src python bench/cpu_bench.py
    PYTHONPATH=src python bench/cpu_bench.py --only softmax,resnet18 --runs 50 --profile
    PYTHONPATH=src python bench/cpu_bench.py --skip-torch-compile --markdown-out table.md

--profile makes the tensorjit worker print its per-stage compile times
(`tensorjit.codegen.report.timing_report()`), the ATen ops that ran as externs
(`fallback_report()`) and the path of its generated C++, and every worker print
torch.profiler's top ops (tensorjit's kernels and externs named by wrapping
`config.profile_kernels`).
--threads N sets OMP_NUM_THREADS for the workers (torch's pool and the OpenMP
runtime of generated kernels); on a machine shared with other jobs 1 thread
gives far steadier figures than 2.
torch.compile is called here only as the reference to beat (allowed in bench/).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

SYSTEMS = ("eager", "torch_compile", "tensorjit")
HERE = os.path.dirname(os.path.abspath(__file__))


# -- workloads (built only inside workers, after the cache variables are set) --


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    label: str
    build: str
    """Name of the builder function below: returns (module, inputs)."""
    bytes_moved: int | None = None
    """Fewest bytes the workload must move (inputs read once, outputs written once)."""
    tolerance: float = 1e-3
    train: bool = False
    """Time a training step (parameter gradients cleared, forward, mean of the output, backward)
    in train mode instead of an inference call under no_grad."""


FLOAT = 4
WORKLOADS = [
    Workload("pointwise_chain", "50 pointwise ops, 1024x1024", "build_pointwise_chain",
             bytes_moved=2 * 1024 * 1024 * FLOAT),
    Workload("softmax", "softmax 1024x4096", "build_softmax", bytes_moved=2 * 1024 * 4096 * FLOAT),
    Workload("layernorm_gelu", "layer norm + GELU 1024x4096", "build_layernorm_gelu",
             bytes_moved=(2 * 1024 * 4096 + 2 * 4096) * FLOAT),
    Workload("tiny_block", "TinyBlock 4x32x256", "build_tiny_block"),
    Workload("resnet18", "ResNet-18 2x3x64x64", "build_resnet18", tolerance=1e-2),
    Workload("gpt2", "GPT-2 2 layers 256 wide, 2x128", "build_gpt2", tolerance=1e-2),
    # Issue 12's small real models (`--only models`): random weights, dropout off, eager attention.
    Workload("mobilenet_v3_small", "MobileNetV3-small 1x3x224x224", "build_mobilenet_v3_small", tolerance=1e-4),
    Workload("vit_tiny", "ViT-tiny (HF ViT, 12 layers, 192 wide) 1x3x224x224", "build_vit_tiny", tolerance=1e-2),
    Workload("gpt2_small", "GPT-2 2 layers 64 wide, 1x32", "build_gpt2_small"),
    Workload("bert_small", "BERT 2 layers 64 wide, 1x32", "build_bert_small"),
    Workload("llama_small", "Llama 2 layers 64 wide, 1x32", "build_llama_small"),
    Workload("t5_small", "T5 2+2 layers 64 wide, 1x32", "build_t5_small"),
    Workload("resnet18_train", "ResNet-18 training step 2x3x64x64", "build_resnet18", tolerance=1e-2, train=True),
    Workload("gpt2_train", "GPT-2 2 layers 64 wide training step, 1x32", "build_gpt2_small", train=True),
]
BY_NAME = {workload.name: workload for workload in WORKLOADS}
GROUPS = {"models": ["resnet18", "mobilenet_v3_small", "vit_tiny", "gpt2_small", "bert_small", "llama_small",
                     "t5_small", "resnet18_train", "gpt2_train"]}


def _modules():
    import torch.nn as nn

    class Lambda(nn.Module):
        """Wraps a function so every compiler sees an nn.Module."""

        def __init__(self, function):
            super().__init__()
            self.function = function

        def forward(self, x):
            return self.function(x)

    return nn, Lambda


def pointwise_chain(x):
    # 50 small pointwise ops (as bench/gpu_bench.py, with the transcendental
    # rotating through sigmoid, tanh and exp): eager makes 50 passes over
    # memory, a fusing compiler one.
    import torch

    transcendental = (torch.sigmoid, torch.tanh, torch.exp)
    for step in range(10):
        x = x * 1.0001
        x = x + 0.001
        x = transcendental[step % 3](x)
        x = torch.relu(x)
        x = x - 0.0005
    return x


def build_pointwise_chain():
    import torch

    _, Lambda = _modules()
    return Lambda(pointwise_chain), [torch.randn(1024, 1024)]


def build_softmax():
    import torch

    _, Lambda = _modules()
    return Lambda(lambda x: torch.softmax(x, dim=-1)), [torch.randn(1024, 4096)]


def build_layernorm_gelu():
    import torch
    import torch.nn.functional as F

    nn, _ = _modules()

    class LayerNormGelu(nn.Module):
        def __init__(self, width: int):
            super().__init__()
            self.norm = nn.LayerNorm(width)

        def forward(self, x):
            return F.gelu(self.norm(x))

    return LayerNormGelu(4096), [torch.randn(1024, 4096)]


def build_tiny_block():
    import torch

    sys.path.insert(0, HERE)
    from gpu_models import TinyBlock

    return TinyBlock(width=256, hidden=1024), [torch.randn(4, 32, 256)]


def build_resnet18():
    import torch

    sys.path.insert(0, HERE)
    from cpu_models import ResNet18

    return ResNet18(), [torch.randn(2, 3, 64, 64)]


def build_gpt2():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    nn, _ = _modules()
    # Eager attention (plain matmul/softmax ops) for all three systems; the token ids are
    # moved into the small vocabulary only to silence transformers' warning.
    settings = GPT2Config(n_layer=2, n_embd=256, n_head=4, vocab_size=8192, n_positions=256,
                          bos_token_id=0, eos_token_id=0, attn_implementation="eager")
    model = GPT2LMHeadModel(settings)

    class Logits(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids):
            return self.inner(input_ids=input_ids, use_cache=False).logits

    return Logits(model), [torch.randint(0, 8192, (2, 128))]


def build_mobilenet_v3_small():
    import torch

    sys.path.insert(0, HERE)
    from cpu_models import MobileNetV3Small, calibrate_batch_norms

    model, inputs = MobileNetV3Small(), [torch.randn(1, 3, 224, 224)]
    calibrate_batch_norms(model, inputs)
    return model, inputs


def build_vit_tiny():
    import torch
    from transformers import ViTConfig, ViTForImageClassification

    # timm's vit_tiny_patch16_224 shapes (timm is not installed here): 12 layers, width 192,
    # 3 heads, MLP 768, 16x16 patches, a 1000-way head.
    settings = ViTConfig(hidden_size=192, num_hidden_layers=12, num_attention_heads=3, intermediate_size=768,
                         image_size=224, patch_size=16, num_labels=1000, attn_implementation="eager")
    return _Field(ViTForImageClassification(settings), "pixel_values", "logits"), [torch.randn(1, 3, 224, 224)]


class _Tokens:
    """Shapes of the small language models: 2 layers, width 64, 4 heads, vocabulary 512, 1x32 tokens."""

    layers, width, heads, vocabulary, length = 2, 64, 4, 512, 32


def _token_ids():
    import torch

    return torch.randint(0, _Tokens.vocabulary, (1, _Tokens.length))


def _Field(model, arguments: str | tuple[str, ...], field: str, **fixed):
    """An nn.Module calling `model(argument=x for each of arguments, **fixed)` and returning
    `.field` (a tensor)."""
    nn, _ = _modules()
    names = (arguments,) if isinstance(arguments, str) else arguments

    class Field(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, x):
            return getattr(self.inner(**{name: x for name in names}, **fixed), field)

    return Field()


def build_gpt2_small():
    from transformers import GPT2Config, GPT2LMHeadModel

    settings = GPT2Config(n_layer=_Tokens.layers, n_embd=_Tokens.width, n_head=_Tokens.heads,
                          vocab_size=_Tokens.vocabulary, n_positions=128, bos_token_id=0, eos_token_id=0,
                          resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager")
    return _Field(GPT2LMHeadModel(settings), "input_ids", "logits", use_cache=False), [_token_ids()]


def build_bert_small():
    from transformers import BertConfig, BertForMaskedLM

    settings = BertConfig(num_hidden_layers=_Tokens.layers, hidden_size=_Tokens.width,
                          num_attention_heads=_Tokens.heads, intermediate_size=4 * _Tokens.width,
                          vocab_size=_Tokens.vocabulary, max_position_embeddings=128, hidden_dropout_prob=0.0,
                          attention_probs_dropout_prob=0.0, attn_implementation="eager")
    return _Field(BertForMaskedLM(settings), "input_ids", "logits"), [_token_ids()]


def build_llama_small():
    from transformers import LlamaConfig, LlamaForCausalLM

    settings = LlamaConfig(num_hidden_layers=_Tokens.layers, hidden_size=_Tokens.width, intermediate_size=128,
                           num_attention_heads=_Tokens.heads, num_key_value_heads=2,
                           vocab_size=_Tokens.vocabulary, max_position_embeddings=128,
                           attn_implementation="eager")
    return _Field(LlamaForCausalLM(settings), "input_ids", "logits", use_cache=False), [_token_ids()]


def build_t5_small():
    from transformers import T5Config, T5ForConditionalGeneration

    settings = T5Config(num_layers=_Tokens.layers, num_decoder_layers=_Tokens.layers, d_model=_Tokens.width,
                        d_kv=_Tokens.width // _Tokens.heads, d_ff=4 * _Tokens.width, num_heads=_Tokens.heads,
                        vocab_size=_Tokens.vocabulary, dropout_rate=0.0, decoder_start_token_id=0,
                        attn_implementation="eager")
    # The decoder reads the same ids as the encoder (shifted ids would add nothing to measure).
    return _Field(T5ForConditionalGeneration(settings), ("input_ids", "decoder_input_ids"), "logits",
                  use_cache=False), [_token_ids()]


# -- worker: one workload, one system, fresh process ------------------------------


def _compile(system: str, model) -> tuple[Callable, float]:
    """The callable for `system` and the seconds spent importing its compiler."""
    import torch

    if system == "eager":
        return model, 0.0
    if system == "torch_compile":
        return torch.compile(model), 0.0
    start = time.perf_counter()
    import tensorjit

    imported = time.perf_counter() - start
    return tensorjit.compile(model), imported


def _timed_ms(function: Callable, inputs: list, runs: int) -> tuple[float, float]:
    """(median, fastest) milliseconds of `runs` calls after 3 warm-up calls."""
    for _ in range(3):
        function(*inputs)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        function(*inputs)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3, min(times) * 1e3


def _check(reference, actual, tolerance: float) -> tuple[str | None, float]:
    """(None or the assert_close message, the largest absolute difference)."""
    import torch

    difference = float((reference.double() - actual.double()).abs().max())
    try:
        torch.testing.assert_close(actual, reference, rtol=tolerance, atol=tolerance)
    except AssertionError as error:
        return " / ".join(str(error).strip().splitlines()[:6]), difference
    return None, difference


def _profile(system: str, function: Callable, inputs: list) -> None:
    """torch.profiler's top ops over 5 calls, on stderr."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for _ in range(5):
            function(*inputs)
    table = profiler.key_averages().table(sort_by="cpu_time_total", row_limit=25,
                                          max_name_column_width=70)
    print(f"--- torch.profiler, {system}, 5 calls ---\n{table}", file=sys.stderr)


def _host_work(function: Callable, inputs: list, calls: int = 10) -> dict[str, Any]:
    """ATen calls (every dispatcher call, nested ones too) and allocations (allocator calls of
    any size, made inside an ATen call or not: torch.compile's wrapper allocates outside the
    dispatcher) per call, from torch.profiler with profile_memory, and the ten commonest calls."""
    import collections

    from torch.profiler import profile

    with profile(profile_memory=True) as profiler:
        for _ in range(calls):
            function(*inputs)
    names = collections.Counter()
    allocations = 0
    for event in profiler.profiler.kineto_results.events():
        if event.name() == "[memory]":
            allocations += event.nbytes() > 0
        elif event.name().startswith("aten::"):
            names[event.name()] += 1
    return {"aten_calls": sum(names.values()) / calls, "allocations": allocations / calls,
            "top_aten": {name: count / calls for name, count in names.most_common(10)}}


def _instrument_tensorjit() -> None:
    """Names every generated kernel and extern in torch.profiler (config.profile_kernels) and
    keeps the generated C++ so it can be written out."""
    from tensorjit.codegen.cpp import compile as cpp_compile
    from tensorjit.config import config

    config.profile_kernels = True
    emit = cpp_compile.emit_program

    def keep_source(program):
        source, orders = emit(program)
        GENERATED_SOURCES.append(source)
        return source, orders

    cpp_compile.emit_program = keep_source


GENERATED_SOURCES: list[str] = []


def _tensorjit_reports(name: str) -> None:
    from tensorjit.codegen import report

    path = os.path.join(tempfile.gettempdir(), f"cpu_bench_{name}_tensorjit.cpp")
    with open(path, "w") as handle:
        handle.write("\n// ---- next graph ----\n".join(GENERATED_SOURCES))
    print(f"--- tensorjit reports ---\n{report.timing_report()}\n{report.fallback_report()}\n"
          f"generated C++ ({len(GENERATED_SOURCES)} graphs): {path}", file=sys.stderr)


def _training_step(function: Callable, model) -> Callable:
    """Clear the parameter gradients, run forward, backward from the output's mean; returns
    (loss, gradients) so a step can be checked against eager's."""

    def step(*inputs):
        for parameter in model.parameters():
            parameter.grad = None
        loss = function(*inputs).float().mean()
        loss.backward()
        return loss

    return step


def _gradients(model):
    import torch

    return torch.cat([parameter.grad.flatten() for parameter in model.parameters() if parameter.grad is not None])


def worker(name: str, system: str, runs: int, profile: bool) -> dict[str, Any]:
    import contextlib

    import torch

    workload = BY_NAME[name]
    torch.manual_seed(0)
    model, inputs = globals()[workload.build]()
    model.train(workload.train)
    result: dict[str, Any] = {"workload": name, "system": system, "threads": torch.get_num_threads()}
    if profile and system == "tensorjit":
        _instrument_tensorjit()
    wrap = _training_step if workload.train else (lambda function, _: function)
    with contextlib.nullcontext() if workload.train else torch.no_grad():
        reference = wrap(model, model)(*inputs)
        if workload.train:
            reference = torch.cat([reference.detach().reshape(1), _gradients(model)])
        start = time.perf_counter()
        function, result["import_s"] = _compile(system, model)
        function = wrap(function, model)
        output = function(*inputs)
        result["cold_s"] = time.perf_counter() - start
        if workload.train:
            output = torch.cat([output.detach().reshape(1), _gradients(model)])
        if system != "eager":
            result["mismatch"], result["max_abs_diff"] = _check(reference, output, workload.tolerance)
        result["median_ms"], result["fastest_ms"] = _timed_ms(function, inputs, runs)
        result.update(_host_work(function, inputs))
        if profile:
            if system == "tensorjit":
                _tensorjit_reports(name)
            _profile(system, function, inputs)
    return result


def interleaved(name: str, runs: int, rounds: int = 5) -> dict[str, dict[str, Any]]:
    """All three systems in one process, timed in alternating rounds of `runs` calls: on a
    machine other jobs share, each round sees the same load on every system. Per system: the
    median over rounds of each round's median, the fastest call, and the rounds' medians."""
    import contextlib

    import torch

    workload = BY_NAME[name]
    torch.manual_seed(0)
    model, inputs = globals()[workload.build]()
    model.train(workload.train)
    wrap = _training_step if workload.train else (lambda function, _: function)
    functions = {system: wrap(_compile(system, model)[0], model) for system in SYSTEMS}
    samples: dict[str, list[list[float]]] = {system: [] for system in SYSTEMS}
    with contextlib.nullcontext() if workload.train else torch.no_grad():
        for system, function in functions.items():
            for _ in range(3):
                function(*inputs)
        for _ in range(rounds):
            for system, function in functions.items():
                times = []
                for _ in range(runs):
                    start = time.perf_counter()
                    function(*inputs)
                    times.append((time.perf_counter() - start) * 1e3)
                samples[system].append(times)
    return {system: {"workload": name, "system": system,
                     "median_ms": statistics.median(statistics.median(r) for r in rounds_),
                     "fastest_ms": min(min(r) for r in rounds_),
                     "round_medians_ms": [round(statistics.median(r), 4) for r in rounds_]}
            for system, rounds_ in samples.items()}


# -- parent: every pair in its own process, then the table ------------------------


def run_pair(name: str, system: str, runs: int, profile: bool, threads: int | None = None) -> dict[str, Any]:
    cache_root = tempfile.mkdtemp(prefix="cpu_bench_")
    # OMP_NUM_THREADS reaches both torch's thread pool and the OpenMP runtime of
    # tensorjit's generated kernels (and torch.compile's).
    threads_variable = {"OMP_NUM_THREADS": str(threads)} if threads else {}
    environment = dict(os.environ, **threads_variable,
                       TORCHINDUCTOR_CACHE_DIR=os.path.join(cache_root, "inductor"),
                       TENSORJIT_CACHE_DIR=os.path.join(cache_root, "tensorjit"),
                       TORCHINDUCTOR_FX_GRAPH_CACHE="0",
                       TORCHINDUCTOR_AUTOGRAD_CACHE="0")
    command = [sys.executable, os.path.abspath(__file__), "--worker", name, system, "--runs", str(runs)]
    if profile:
        command.append("--profile")
    try:
        finished = subprocess.run(command, env=environment, stdout=subprocess.PIPE, text=True, timeout=1200)
    except subprocess.TimeoutExpired:
        return {"workload": name, "system": system, "error": "timed out after 1200 s"}
    finally:
        shutil.rmtree(cache_root, ignore_errors=True)
    lines = [line for line in finished.stdout.splitlines() if line.startswith("{")]
    if finished.returncode != 0 or not lines:
        return {"workload": name, "system": system, "error": f"worker exit status {finished.returncode}"}
    return json.loads(lines[-1])


def _cell(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(rows: dict[str, dict[str, dict[str, Any]]]) -> str:
    lines = [
        "| workload | eager ms | torch.compile ms | tensorjit ms | tj vs eager | tc vs eager | tj vs torch.compile "
        "| tc cold s | tj cold s | ATen calls tc / tj | allocations tc / tj | GB/s eager | GB/s tc | GB/s tj |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, by_system in rows.items():
        workload = BY_NAME[name]
        eager, tc, tj = (by_system.get(system, {}).get("median_ms") for system in SYSTEMS)
        tj_cell = _cell(tj, ".3f") + (" MISMATCH" if by_system.get("tensorjit", {}).get("mismatch") else "")
        bandwidth = [_cell(workload.bytes_moved / ms / 1e6 if workload.bytes_moved and ms else None, ".1f")
                     for ms in (eager, tc, tj)]
        host = [" / ".join(_cell(by_system.get(system, {}).get(key), "g") for system in SYSTEMS[1:])
                for key in ("aten_calls", "allocations")]
        lines.append(
            f"| {workload.label} | {_cell(eager, '.3f')} | {_cell(tc, '.3f')} | {tj_cell} "
            f"| {_cell(eager / tj if eager and tj else None, '.2f')} "
            f"| {_cell(eager / tc if eager and tc else None, '.2f')} "
            f"| {_cell(tc / tj if tc and tj else None, '.2f')} "
            f"| {_cell(by_system.get('torch_compile', {}).get('cold_s'), '.1f')} "
            f"| {_cell(by_system.get('tensorjit', {}).get('cold_s'), '.1f')} | {' | '.join(host)} "
            f"| {' | '.join(bandwidth)} |")
    return "\n".join(lines)


def _report_problems(result: dict[str, Any]) -> None:
    where = f"{result['workload']} / {result['system']}"
    if result.get("error"):
        print(f"!!! {where}: {result['error']}", flush=True)
    if result.get("mismatch"):
        print(f"!!! MISMATCH {where} (max abs diff {result.get('max_abs_diff')}): {result['mismatch']}",
              flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="timed calls per median (after 3 warm-ups)")
    parser.add_argument("--only", default="", help="comma-separated workload names or groups: "
                        + ",".join([*BY_NAME, *GROUPS]))
    parser.add_argument("--skip-torch-compile", action="store_true")
    parser.add_argument("--markdown-out", help="also write the table to this file")
    parser.add_argument("--profile", action="store_true", help="compile-stage times, fallbacks, profiler tables")
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS for the workers (default: left unset)")
    parser.add_argument("--interleaved", action="store_true",
                        help="all systems in one process, timed in alternating rounds (no cold compile, no "
                             "fresh caches): steadier ratios on a shared machine")
    parser.add_argument("--worker", nargs=2, metavar=("WORKLOAD", "SYSTEM"), help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.worker:
        print(json.dumps(worker(*options.worker, options.runs, options.profile)), flush=True)
        return
    if options.interleaved:
        if options.threads:
            os.environ["OMP_NUM_THREADS"] = str(options.threads)
        import torch

        torch.set_num_threads(options.threads or torch.get_num_threads())
        rows = {}
        for name in [member for name in options.only.split(",") if name for member in GROUPS.get(name, [name])]:
            rows[name] = interleaved(name, options.runs)
            print(f"{name:18s} " + "  ".join(f"{s} {r['median_ms']:.3f} ({r['fastest_ms']:.3f}) {r['round_medians_ms']}"
                                             for s, r in rows[name].items()), flush=True)
        print("\n" + table(rows))
        return
    names = [member for name in options.only.split(",") if name for member in GROUPS.get(name, [name])]
    names = names or list(BY_NAME)
    unknown = [name for name in names if name not in BY_NAME]
    if unknown:
        parser.error(f"unknown workload(s) {unknown}; known: {list(BY_NAME)}")
    systems = [system for system in SYSTEMS if not (options.skip_torch_compile and system == "torch_compile")]
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for name in names:
        rows[name] = {}
        for system in systems:
            result = run_pair(name, system, options.runs, options.profile, options.threads)
            rows[name][system] = result
            _report_problems(result)
            print(f"{name:16s} {system:14s} {json.dumps(result)}", flush=True)
    text = table(rows)
    print("\n" + text)
    if options.markdown_out:
        with open(options.markdown_out, "w") as handle:
            handle.write(text + "\n")


if __name__ == "__main__":
    main()
