"""PyTorch's OpInfo samples (float32) through each code generator, compared with eager.

For every op in `op_db` with float32 support: up to SAMPLES_PER_OP of its
samples are traced with make_fx(decompositions()) and compiled by the code
generator under test; each result must equal eager, and an op passes only if
every sample tried passes. Samples eager cannot run twice identically (random
ops without a seed, empty tensors) or that make_fx cannot trace are "not
applicable"; an op with no applicable sample is counted apart. A graph the code
generator gave up on (it runs through ATen instead, correctly) counts as
passing but is reported as "whole-graph fallback" (an op is one when any of its
samples is), so the rate cannot hide a code generator that compiles nothing.

- C++ emitter: CPU tensors.
- Triton emitter: CUDA tensors, or on a machine without CUDA the same kernels in
  Triton's interpreter (TRITON_INTERPRET=1, set by tests/conftest.py) on CPU
  tensors, under a time budget (the interpreter is slow).

Samples come from `op.sample_inputs_func` directly: `op.sample_inputs` wraps
them in a tracker that walks the Python stack with `inspect.stack()` for every
op, which took half of this test's time.

TENSORJIT_OPINFO_BUDGET_S overrides the time budgets; TENSORJIT_OPINFO_REPORT names a
file to write the per-op results to.
"""

from __future__ import annotations

import multiprocessing
import os
import time
import warnings

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from tensorjit.codegen.decomp import decompositions

MIN_PASS_RATE = 0.95
MAX_WHOLE_GRAPH_FALLBACKS = 0.05
SAMPLES_PER_OP = 3
SAMPLE_SEED = 0
"""The seed set before drawing each sample, as OpInfo's own tracker does (fixed samples)."""
RANDOM_SEED = 42
"""The seed set before every eager and compiled run. Ops that seed themselves in eager
(OpInfo's wrapper_set_seed, for dropout, rand_like, ...) use 42; the traced graph
loses that call, so the same seed before the compiled run makes them comparable."""


def run_one(op, sample, compile_graph) -> str:
    inputs = [sample.input, *[a for a in sample.args if isinstance(a, torch.Tensor)]]
    tensor_positions = [i for i, a in enumerate(sample.args) if isinstance(a, torch.Tensor)]

    def fn(*tensors):
        args = list(sample.args)
        for position, tensor in zip(tensor_positions, tensors[1:]):
            args[position] = tensor
        return op.op(tensors[0], *args, **sample.kwargs)
    try:
        torch.manual_seed(RANDOM_SEED)
        expected = fn(*inputs)
        torch.manual_seed(RANDOM_SEED)
        again = fn(*inputs)
        torch.testing.assert_close(again, expected, equal_nan=True)
        gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    except Exception:
        return "not_applicable"  # eager raises, is not deterministic, or cannot be traced
    try:
        compiled = compile_graph(gm, inputs)
        torch.manual_seed(RANDOM_SEED)  # random ops that run as ATen externs draw the same numbers
        actual = compiled(*inputs)
    except Exception as error:  # noqa: BLE001 - a crash is a failure of ours
        return f"fail: {type(error).__name__}: {str(error).splitlines()[0][:100] if str(error) else ''}"
    try:
        torch.testing.assert_close(actual, expected, equal_nan=True, atol=1e-4, rtol=1e-4,
                                   check_dtype=True, check_stride=False)
    except (AssertionError, TypeError, ValueError) as error:
        return f"fail: {str(error).splitlines()[0][:100]}"
    if getattr(compiled, "__self__", None) is gm:
        return "pass (whole-graph fallback)"
    return "pass"


SHARDS = 2
"""Processes the op table is split over when tensors are on the CPU: the run is
dominated by the C++ compiler and Triton's interpreter, each on one core. The
workers are spawned, not forked: a forked child of a process that has run
OpenMP code (torch's CPU kernels, the C++ emitter's) can hang in its first
parallel region."""


def run_op_db(device: str, compile_graph, budget_s: float) -> dict[str, str]:
    shards = min(SHARDS, os.cpu_count() or 1) if device == "cpu" else 1
    if shards == 1:
        return run_shard(device, compile_graph, budget_s, 0, 1)
    pool = multiprocessing.get_context("spawn").Pool(shards)
    try:
        parts = pool.starmap(run_shard, [(device, compile_graph, budget_s, index, shards) for index in range(shards)])
        pool.close()
    finally:
        pool.terminate()
        pool.join()
    order = {name: position for part in parts for position, name in enumerate(part)}
    merged = {name: outcome for part in parts for name, outcome in part.items()}
    return dict(sorted(merged.items(), key=lambda item: (order[item[0]], item[0])))


def run_shard(device: str, compile_graph, budget_s: float, index: int, shards: int) -> dict[str, str]:
    """Results for every `shards`-th op of the table, starting at `index`, until the budget is spent."""
    from torch.testing._internal.common_methods_invocations import op_db

    if shards > 1:
        torch.set_num_threads(1)  # one core per worker
        warnings.simplefilter("ignore")  # as the tests' filterwarnings mark does in this process
    start, results, seen = time.time(), {}, set()
    for op in op_db:
        if op.name in seen or torch.float32 not in op.supported_dtypes(device):
            continue
        seen.add(op.name)
        if (len(seen) - 1) % shards != index:
            continue
        if time.time() - start > budget_s:
            break
        results[op.name] = run_samples(op, device, compile_graph)
    return results


UNINITIALIZED = {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"}
"""Ops whose values are whatever the memory held: two eager runs may agree by chance
(a fresh process's zeroed pages), a third need not."""


def run_samples(op, device: str, compile_graph) -> str:
    """The op's result over its first SAMPLES_PER_OP samples: the first failure, else a pass."""
    if op.name in UNINITIALIZED:
        return "not_applicable"
    outcomes = []
    for index, sample in enumerate(first_samples(op, device)):
        if sample is None or not isinstance(sample.input, torch.Tensor):
            outcomes.append("not_applicable")
            continue
        outcome = run_one(op, sample, compile_graph)
        if outcome.startswith("fail"):
            return f"{outcome} (sample {index})"
        outcomes.append(outcome)
    if "pass (whole-graph fallback)" in outcomes:
        return "pass (whole-graph fallback)"
    return "pass" if "pass" in outcomes else "not_applicable"


def first_samples(op, device: str):
    """Up to SAMPLES_PER_OP samples, each drawn after seeding; None where drawing one raised."""
    torch.manual_seed(SAMPLE_SEED)
    try:
        samples = iter(op.sample_inputs_func(op, device, torch.float32, False))
    except Exception:
        yield None
        return
    for _ in range(SAMPLES_PER_OP):
        torch.manual_seed(SAMPLE_SEED)
        try:
            sample = next(samples)
        except StopIteration:
            return
        except Exception:
            yield None
            return
        yield sample


def summarize(name: str, results: dict[str, str], seconds: float) -> tuple[float, float, str]:
    applicable = {k: v for k, v in results.items() if v != "not_applicable"}
    passed = sum(v.startswith("pass") for v in applicable.values())
    whole = sum(v == "pass (whole-graph fallback)" for v in applicable.values())
    rate = passed / max(len(applicable), 1)
    fallback_rate = whole / max(len(applicable), 1)
    failures = sorted(k for k, v in applicable.items() if not v.startswith("pass"))
    line = (f"opinfo float32 {name}: {passed}/{len(applicable)} applicable ops pass ({rate:.1%}), "
            f"{whole} of them through a whole-graph ATen fallback; {len(results) - len(applicable)} "
            f"not applicable; {len(results)} ops in {seconds:.0f}s")
    details = "\n".join(f"  {k}: {applicable[k]}" for k in failures)
    report = os.environ.get("TENSORJIT_OPINFO_REPORT")
    if report:
        with open(report, "a") as handle:
            handle.write(line + "\n" + details + "\n" + "\n".join(
                f"  fallback: {k}" for k, v in applicable.items() if v == "pass (whole-graph fallback)") + "\n")
    print(line)
    print(details)
    return rate, fallback_rate, line


def budget(default: float) -> float:
    return float(os.environ.get("TENSORJIT_OPINFO_BUDGET_S", default))


@pytest.mark.filterwarnings("ignore")
def test_cpp_emitter_opinfo_float32():
    from tensorjit.codegen.cpp import compile_aten_graph

    start = time.time()
    results = run_op_db("cpu", compile_aten_graph, budget(240))
    rate, fallback_rate, line = summarize("cpu (C++)", results, time.time() - start)
    assert rate >= MIN_PASS_RATE, line
    assert fallback_rate <= MAX_WHOLE_GRAPH_FALLBACKS, line


@pytest.mark.filterwarnings("ignore")
def test_triton_emitter_opinfo_float32():
    pytest.importorskip("triton")
    from tensorjit.codegen.triton import compile_aten_graph

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("no CUDA and Triton's interpreter is off")
    start = time.time()
    results = run_op_db(device, compile_aten_graph, budget(600 if device == "cuda" else 150))
    rate, fallback_rate, line = summarize(f"{device} (Triton)", results, time.time() - start)
    assert len(results) >= 50, line
    assert rate >= MIN_PASS_RATE, line
    assert fallback_rate <= MAX_WHOLE_GRAPH_FALLBACKS, line

