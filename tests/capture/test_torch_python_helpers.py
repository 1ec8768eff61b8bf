"""torch's plain-Python helpers are inlined, not recorded as graph operations (values/functions.py
`_TORCH_PYTHON_NAMESPACES`): torch.nn.modules.utils._ntuple(3) returns a function, which a
graph node cannot."""

import torch

import tensorjit
from torch.nn.modules.utils import _ntuple, _pair


def test_ntuple_and_pair_in_one_graph():
    def fn(a):
        return torch.zeros(_pair(a.size())) + a + torch.ones(_ntuple(3)(3)).sum()

    x = torch.ones(2, 2)
    torch.testing.assert_close(tensorjit.compile(fn, backend="eager", fullgraph=True)(x), fn(x))
