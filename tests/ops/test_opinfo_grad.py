"""PyTorch's OpInfo samples through ahead-of-time autograd: gradients compiled == eager.

For every op in `op_db` whose backward supports float32 (and, separately, complex64):
the first SAMPLES_PER_OP of its samples with requires_grad are traced with make_fx into a
graph, compiled by a backend (`aot_eager`, `inductor`), run forward, and differentiated
with fixed random cotangents (`torch.autograd.grad`); outputs and the gradient of every
input must equal eager's (`sample.output_process_fn_grad` applied, as OpInfo's own
gradient tests do). Samples eager cannot run twice identically, that have nothing to
differentiate, or that make_fx cannot trace are "not applicable". A graph the backend
runs eagerly (`aot_compile` gave up on it, with a logged reason) passes, counted apart.

Failures must be known: KNOWN_FAILURES names each with the reason it is not fixed yet
(docs/correctness/autograd-correct.md); any other failure, or a known one that now
passes, fails the test, so the list stays true.

The ops are split over SHARDS spawned workers with one thread each (the machine's 2
cores), under a time budget per backend and dtype (TENSORJIT_OPINFO_BUDGET_S overrides it;
TENSORJIT_OPINFO_REPORT names a file for per-op results). On the 2-core machine the four
tests take about 8 minutes: aot_eager reaches every op (~140 s float32, ~110 s complex64);
inductor's 120 s reach about half the float32 ops (the C++ compiler dominates) and most
complex64 ones (complex nodes are ATen externs). TENSORJIT_OPINFO_BUDGET_S=3600 runs all.
"""

from __future__ import annotations

import multiprocessing
import os
import time
import warnings

import pytest
import torch
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import make_fx

SAMPLES_PER_OP = {"aot_eager": 2, "inductor": 1}
"""Samples tried per op: the inductor backend compiles C++ for each forward and backward."""
SEED = 0
SHARDS = 2
TOLERANCE = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.complex64: dict(atol=1e-4, rtol=1e-4)}

KNOWN_FAILURES: dict[tuple[str, str, str], str] = {}
"""(backend, dtype, op name) -> why it still differs from eager."""


def _flatten_sample(sample):
    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    return leaves, spec, positions


def _differentiable(t) -> bool:
    return isinstance(t, torch.Tensor) and t.requires_grad and (t.is_floating_point() or t.is_complex())


def _run(op, sample, fn, tensors, cotangent_seed: int):
    """(outputs, gradients of the tensors that require grad) of one forward and backward."""
    tensors = [t.detach().clone().requires_grad_(t.requires_grad) for t in tensors]
    torch.manual_seed(42)
    outputs = sample.output_process_fn_grad(fn(*tensors))
    flat = [o for o in pytree.tree_leaves(outputs) if isinstance(o, torch.Tensor)]
    wanted = [o for o in flat if _differentiable(o)]
    sources = [t for t in tensors if _differentiable(t)]
    if not wanted or not sources:
        return None
    generator = torch.Generator().manual_seed(cotangent_seed)
    cotangents = [torch.randn(o.shape, dtype=o.dtype, generator=generator) for o in wanted]
    grads = torch.autograd.grad(wanted, sources, cotangents, allow_unused=True)
    return [o.detach() for o in flat], [None if g is None else g.detach() for g in grads]


def run_one(op, sample, backend, dtype) -> str:
    leaves, spec, positions = _flatten_sample(sample)
    tensors = [leaves[i] for i in positions]

    def fn(*values):
        filled = list(leaves)
        for position, value in zip(positions, values):
            filled[position] = value
        value, args, kwargs = pytree.tree_unflatten(filled, spec)
        return op.op(value, *args, **kwargs)
    try:
        expected = _run(op, sample, fn, tensors, SEED)
        if expected is None:
            return "not_applicable"
        torch.testing.assert_close(_run(op, sample, fn, tensors, SEED), expected, equal_nan=True)
        gm = make_fx(fn)(*tensors)
    except Exception:
        return "not_applicable"  # eager raises, is not deterministic, or cannot be traced
    try:
        compiled = backend(gm, list(tensors))

        def run_compiled(*values):
            out = compiled(*values)
            return out[0] if isinstance(out, (tuple, list)) and len(out) == 1 and \
                not isinstance(fn(*tensors), (tuple, list)) else out
        actual = _run(op, sample, run_compiled, tensors, SEED)
    except Exception as error:  # noqa: BLE001 - a crash is a failure of ours
        return f"fail: {type(error).__name__}: {str(error).splitlines()[0][:100] if str(error) else ''}"
    if actual is None:
        return "fail: no gradient"
    try:
        torch.testing.assert_close(actual, expected, equal_nan=True, check_stride=False, **TOLERANCE[dtype])
    except (AssertionError, TypeError, ValueError) as error:
        return f"fail: {' '.join(str(error).split())[:160]}"
    if getattr(compiled, "__self__", None) is gm:
        return "pass (eager)"
    return "pass"


def backend_named(name: str):
    if name == "aot_eager":
        from tensorjit.backends.aot_eager import aot_eager
        return aot_eager
    from tensorjit.backends.inductor import inductor
    return inductor


def run_shard(backend_name: str, dtype: torch.dtype, budget_s: float, index: int, shards: int) -> dict[str, str]:
    from torch.testing._internal.common_methods_invocations import op_db

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    import logging
    logging.getLogger("tensorjit").setLevel(logging.ERROR)
    backend = backend_named(backend_name)
    start, results, seen = time.time(), {}, set()
    for op in op_db:
        if op.name in seen or not op.supports_autograd or dtype not in op.supported_backward_dtypes("cpu"):
            continue
        seen.add(op.name)
        if (len(seen) - 1) % shards != index:
            continue
        if time.time() - start > budget_s:
            break
        results[op.name] = run_samples(op, backend, dtype, SAMPLES_PER_OP[backend_name])
    return results


def run_samples(op, backend, dtype, samples_per_op: int) -> str:
    outcomes = []
    torch.manual_seed(SEED)
    try:
        samples = iter(op.sample_inputs_func(op, "cpu", dtype, True))
        for index in range(samples_per_op):
            torch.manual_seed(SEED)
            sample = next(samples, None)
            if sample is None:
                break
            outcome = run_one(op, sample, backend, dtype)
            if outcome.startswith("fail"):
                return f"{outcome} (sample {index})"
            outcomes.append(outcome)
    except Exception:  # noqa: BLE001 - drawing samples raised: nothing to compare
        pass
    for outcome in ("pass", "pass (eager)"):
        if outcome in outcomes:
            return outcome
    return "not_applicable"


def run_op_db(backend_name: str, dtype: torch.dtype, budget_s: float) -> dict[str, str]:
    shards = min(SHARDS, os.cpu_count() or 1)
    pool = multiprocessing.get_context("spawn").Pool(shards)
    try:
        parts = pool.starmap(run_shard, [(backend_name, dtype, budget_s, i, shards) for i in range(shards)])
        pool.close()
    finally:
        pool.terminate()
        pool.join()
    return dict(sorted((name, outcome) for part in parts for name, outcome in part.items()))


def check(backend_name: str, dtype: torch.dtype, default_budget_s: float) -> None:
    start = time.time()
    results = run_op_db(backend_name, dtype, float(os.environ.get("TENSORJIT_OPINFO_BUDGET_S", default_budget_s)))
    dtype_name = str(dtype).replace("torch.", "")
    applicable = {k: v for k, v in results.items() if v != "not_applicable"}
    failures = {k: v for k, v in applicable.items() if v.startswith("fail")}
    known = {name for (b, d, name) in KNOWN_FAILURES if b == backend_name and d == dtype_name}
    eager = sum(v == "pass (eager)" for v in applicable.values())
    line = (f"opinfo gradients {backend_name} {dtype_name}: {len(applicable) - len(failures)}/{len(applicable)} "
            f"applicable ops pass ({eager} run eagerly by aot_compile); {len(results) - len(applicable)} not "
            f"applicable; {len(results)} ops in {time.time() - start:.0f}s")
    details = "\n".join(f"  {k}: {v}" for k, v in sorted(failures.items()))
    print(line + "\n" + details)
    report = os.environ.get("TENSORJIT_OPINFO_REPORT")
    if report:
        with open(report, "a") as handle:
            handle.write(line + "\n" + details + "\n" + "\n".join(
                f"  eager: {k}" for k, v in applicable.items() if v == "pass (eager)") + "\n")
    unexpected = sorted(set(failures) - known)
    fixed = sorted(name for name in known if name in applicable and name not in failures)
    assert not unexpected, line + "\n" + "\n".join(f"  {k}: {failures[k]}" for k in unexpected)
    assert not fixed, f"{line}\n  known failures that now pass (remove them from KNOWN_FAILURES): {fixed}"


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=["float32", "complex64"])
def test_aot_eager_gradients(dtype):
    check("aot_eager", dtype, 150)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=["float32", "complex64"])
def test_inductor_gradients(dtype):
    check("inductor", dtype, 120)
