"""The interpreter on small functions: what enters the graph, what is folded, where it breaks."""

import operator

import pytest
import torch

import tensorjit


class Recorder:
    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward

    def targets(self, i=0):
        return [n.target for n in self.graphs[i].graph.nodes if n.op in ("call_function", "call_method")]


def compiled(fn, **kw):
    rec = Recorder()
    return tensorjit.compile(fn, backend=rec, **kw), rec


def test_python_arithmetic_is_folded_and_tensor_ops_recorded():
    def fn(x):
        scale = (2 + 3) * 0.5
        return x * scale

    c, rec = compiled(fn)
    x = torch.randn(4)
    torch.testing.assert_close(c(x), fn(x))
    assert rec.targets() == [operator.mul]


def test_shape_arithmetic_is_static():
    def fn(x):
        n = x.shape[0] * 2
        return x.new_zeros(n) + x.size(-1)

    c, rec = compiled(fn)
    x = torch.randn(3, 5)
    torch.testing.assert_close(c(x), fn(x))
    assert len(rec.graphs) == 1


def test_parameters_are_graph_inputs_not_constants():
    lin = torch.nn.Linear(3, 2)
    c, rec = compiled(lin)
    x = torch.randn(4, 3)
    c(x)
    placeholders = [n for n in rec.graphs[0].graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == 3
    assert not any(n.op == "get_attr" for n in rec.graphs[0].graph.nodes)


def test_inlined_user_function_and_closure():
    k = 3.0

    def helper(t):
        return t.sin() * k

    def fn(x):
        return helper(x) + helper(x.cos())

    c, rec = compiled(fn)
    x = torch.randn(5)
    torch.testing.assert_close(c(x), fn(x))
    assert len(rec.graphs) == 1


def test_branch_on_tensor_value_breaks_into_two_graphs():
    def fn(x):
        y = x + 1
        if y.sum() > 0:
            return y * 2
        return y * 3

    c, rec = compiled(fn)
    for x in (torch.ones(3), -torch.ones(3) * 4):
        torch.testing.assert_close(c(x), fn(x))
    assert len(rec.graphs) == 3


def test_fullgraph_names_the_line():
    def fn(x):
        print("side effect")
        return x

    c, _ = compiled(fn, fullgraph=True)
    with pytest.raises(tensorjit.GraphBreakError, match=r"test_interpreter.py:\d+"):
        c(torch.ones(1))


def test_internal_error_names_user_location(monkeypatch):
    from tensorjit.capture import opcodes

    def broken(f, i):
        raise ZeroDivisionError("bug")

    monkeypatch.setitem(opcodes.HANDLERS, "BINARY_OP", broken)

    def fn(x):
        return x + 1

    c, _ = compiled(fn)
    with pytest.raises(tensorjit.CaptureError, match=r"test_interpreter.py:\d+ in fn"):
        c(torch.ones(1))


def test_unknown_backend_mode_and_option_list_valid_choices():
    with pytest.raises(ValueError, match="valid backends are: .*eager"):
        tensorjit.compile(lambda x: x, backend="nope")
    with pytest.raises(ValueError, match="valid modes are: .*reduce-overhead"):
        tensorjit.compile(lambda x: x, mode="fast")
    with pytest.raises(ValueError, match="valid options are: .*cache_size_limit"):
        tensorjit.compile(lambda x: x, options={"bogus": 1})
    with pytest.raises(TypeError):
        tensorjit.compile(42)


def test_every_opcode_handler_is_named_after_its_opcode():
    import dis
    from tensorjit.capture.opcodes import HANDLERS
    known = set(dis.opmap)
    assert set(HANDLERS) <= known, sorted(set(HANDLERS) - known)
