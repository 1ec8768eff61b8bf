"""PyTorch OpInfo samples (float32, CPU) through make_fx(decompositions()) -> compile_aten_graph vs eager.

Ops whose first sample cannot be traced are "not applicable" (counted apart).
Prints the pass rate and writes a summary line to tests/ops/opinfo_summary.txt.
"""

import os
import time

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from tensorjit.codegen import compile_aten_graph
from tensorjit.codegen.decomp import decompositions

TIME_BUDGET_S = 150


def tensors_only(args):
    return all(isinstance(a, torch.Tensor) for a in args)


def run_one(op, sample):
    inputs = [sample.input, *[a for a in sample.args if isinstance(a, torch.Tensor)]]
    tensor_positions = [i for i, a in enumerate(sample.args) if isinstance(a, torch.Tensor)]

    def fn(*tensors):
        args = list(sample.args)
        for position, tensor in zip(tensor_positions, tensors[1:]):
            args[position] = tensor
        return op.op(tensors[0], *args, **sample.kwargs)
    try:
        torch.manual_seed(0)
        expected = fn(*inputs)
        torch.manual_seed(0)
        again = fn(*inputs)
        torch.testing.assert_close(again, expected, equal_nan=True)
    except Exception:
        return "not_applicable"  # eager raises on CPU, or is not deterministic (random, empty)
    try:
        gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    except Exception:
        return "not_applicable"
    compiled = compile_aten_graph(gm, inputs)
    torch.manual_seed(0)  # random ops run as ATen externs: same seed, same numbers
    actual = compiled(*inputs)
    try:
        torch.testing.assert_close(actual, expected, equal_nan=True, atol=1e-4, rtol=1e-4,
                                   check_dtype=True, check_stride=False)
    except (AssertionError, TypeError, ValueError) as error:
        return f"fail: {str(error).splitlines()[0][:100]}"
    return "pass"


@pytest.mark.filterwarnings("ignore")
def test_opinfo_float32_pass_rate():
    from torch.testing._internal.common_methods_invocations import op_db
    start = time.time()
    results = {}
    for op in op_db:
        if time.time() - start > TIME_BUDGET_S:
            break
        if torch.float32 not in op.supported_dtypes("cpu") or op.name in results:
            continue
        try:
            sample = next(iter(op.sample_inputs("cpu", torch.float32, requires_grad=False)))
            if not isinstance(sample.input, torch.Tensor):
                results[op.name] = "not_applicable"
                continue
            results[op.name] = run_one(op, sample)
        except Exception as error:  # eager itself raised, or compile raised: ours unless tracing
            results[op.name] = f"fail: {type(error).__name__}: {str(error)[:80]}"
    applicable = {k: v for k, v in results.items() if v != "not_applicable"}
    passed = sum(v == "pass" for v in applicable.values())
    rate = passed / max(len(applicable), 1)
    failures = sorted(k for k, v in applicable.items() if v != "pass")
    line = (f"opinfo float32 cpu: {passed}/{len(applicable)} applicable ops pass ({rate:.1%}); "
            f"{len(results) - len(applicable)} not applicable; {len(results)} ops tried in {time.time() - start:.0f}s")
    print(line)
    print("failures:", failures)
    with open(os.path.join(os.path.dirname(__file__), "opinfo_summary.txt"), "w") as handle:
        handle.write(line + "\nfailures: " + ", ".join(failures) + "\n")
        for name in failures:
            handle.write(f"  {name}: {applicable[name]}\n")
    assert rate >= 0.95, line
