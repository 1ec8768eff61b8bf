"""copy.deepcopy of plain data in the function (polyfills/copy_module.py): new containers of the
same items, shared references copied once; the originals untouched."""

import copy

import torch

import tensorjit

NESTED = {"a": {"b": 1.0}, "c": [2.0, 3.0]}


def test_nested_containers_are_copied():
    def fn(x):
        d = copy.deepcopy(NESTED)
        d["a"]["b"] = 5.0
        d["c"].append(4.0)
        shared = [1]
        pair = copy.deepcopy([shared, shared])
        pair[0].append(2)
        return x + d["a"]["b"] + d["c"][-1] + len(pair[1]), d

    out, d = tensorjit.compile(fn, backend="eager", fullgraph=True)(torch.zeros(1))
    torch.testing.assert_close(out, torch.full((1,), 11.0))
    assert d == {"a": {"b": 5.0}, "c": [2.0, 3.0, 4.0]}
    assert NESTED == {"a": {"b": 1.0}, "c": [2.0, 3.0]}


def test_a_tensor_inside_breaks_and_runs():
    def fn(x):
        return copy.deepcopy([x])[0] + 1

    x = torch.zeros(1)
    torch.testing.assert_close(tensorjit.compile(fn, backend="eager")(x), x + 1)
