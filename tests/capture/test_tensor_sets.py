"""Tensors in sets made in the function: members by identity, as Python hashes tensors."""

import pytest
import torch

import tensorjit
from conformance.harness import CountingBackend


def test_module_parameters_are_read_in_the_graph():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    shared = torch.nn.Linear(4, 4)
    model.append(shared).append(shared)  # a module twice: nn.Module's memo set drops the repeat

    def fn(x):
        penalty = sum(p.pow(2).sum() for p in model.parameters())
        return x * penalty, len(list(model.parameters()))

    backend = CountingBackend()
    x = torch.randn(2)
    out, ref = tensorjit.compile(fn, backend=backend, fullgraph=True)(x), fn(x)
    torch.testing.assert_close(out[0], ref[0])
    assert out[1] == ref[1] == 6
    assert backend.graph_count == 1


def test_membership_of_tensors_by_identity_and_no_iteration_order_assumed():
    def fn(x, y):
        seen = {x}
        seen.add(x)
        z = x + 0
        return len(seen), x in seen, y in seen, z in seen

    assert tensorjit.compile(fn, backend="eager", fullgraph=True)(torch.ones(2), torch.ones(2)) == \
        (1, True, False, False)

    def iterate(x, y):
        return [t * 2 for t in {x, y}]

    with pytest.raises(tensorjit.GraphBreakError, match="set of tensors"):
        tensorjit.compile(iterate, backend="eager", fullgraph=True)(torch.ones(2), torch.zeros(2))
    out = tensorjit.compile(iterate, backend="eager")(torch.ones(2), torch.zeros(2))
    assert sorted(float(t.sum()) for t in out) == [0.0, 4.0]
