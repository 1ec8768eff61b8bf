"""C struct sequences read from outside whose fields are all items (sys.version_info,
torch.return_types.*) are read as the tuples they are (builder.py `_is_struct_sequence`): indexed,
sliced (a plain tuple, as in CPython), compared and read by field name in the graph, where
`sys.version_info[:2]` broke ("version_info.__getitem__ is not a Python method")."""

import sys

import torch

import tensorjit


def test_version_info_reads_like_python():
    def fn(x):
        v = sys.version_info
        return x + 1, v[:2], v[0], v.major, v >= (3, 8), v.releaselevel, type(v[1:]), v

    x = torch.ones(2)
    expected, got = fn(x), tensorjit.compile(fn, backend="eager", fullgraph=True)(x)
    assert got[1:] == expected[1:]
    assert got[-1] is sys.version_info


def test_return_types_from_outside():
    def fn(x, r):
        return x + r.values, r.indices * 2, r[0] - 1, r, r[:1]

    x, r = torch.ones(3), torch.max(torch.randn(3, 4), 1)
    expected, got = fn(x, r), tensorjit.compile(fn, backend="eager", fullgraph=True)(x, r)
    for e, g in zip(expected[:3], got[:3]):
        torch.testing.assert_close(g, e)
    assert got[3] is r and type(got[4]) is tuple


def test_other_struct_sequence_recompiles():
    def fn(x, r):
        return x + r.values

    compiled = tensorjit.compile(fn, backend="eager", fullgraph=True)
    x = torch.ones(3)
    for r in (torch.max(torch.randn(3, 4), 1), torch.min(torch.randn(3, 5), 1)):
        torch.testing.assert_close(compiled(x, r), fn(x, r))
