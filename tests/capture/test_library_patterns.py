"""Patterns real libraries use inside forward(): each stays in one graph and matches eager."""

import dataclasses
import operator
import os
import typing
from collections import OrderedDict

import torch

import tensorjit


class Recorder:
    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward


def one_graph(fn, *args):
    rec = Recorder()
    compiled = tensorjit.compile(fn, backend=rec)
    out, expected = compiled(*args), fn(*args)
    return rec, out, expected


class ModelOutput(OrderedDict):
    """Hugging Face's protocol: string keys read items, integers read to_tuple()."""

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None:
                self[f.name] = value

    def __getitem__(self, k):
        return dict(self.items())[k] if isinstance(k, str) else self.to_tuple()[k]

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


@dataclasses.dataclass
class Output(ModelOutput):
    logits: torch.Tensor = None
    hidden: torch.Tensor = None
    extra: typing.Any = None


def test_output_records_stay_in_the_graph():
    def fn(x):
        out = Output(logits=x * 2, hidden=x + 1)
        return out[0] + out["hidden"] + out.logits, out.to_tuple()[1]

    rec, out, expected = one_graph(fn, torch.randn(3))
    torch.testing.assert_close(out, expected)
    assert len(rec.graphs) == 1


def test_returned_record_is_rebuilt():
    compiled = tensorjit.compile(lambda x: Output(logits=x.sin()), backend="eager")
    out = compiled(torch.ones(2))
    assert isinstance(out, Output) and list(out.keys()) == ["logits"]
    torch.testing.assert_close(out.logits, torch.ones(2).sin())


def test_environment_variables_are_guarded_one_by_one(monkeypatch):
    def fn(x):
        return x * 2 if os.environ.get("TJ_TEST_FLAG", "0") == "1" else x * 3

    rec = Recorder()
    compiled = tensorjit.compile(fn, backend=rec)
    monkeypatch.setenv("TJ_TEST_FLAG", "0")
    torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 3.0))
    monkeypatch.setenv("TJ_TEST_FLAG", "1")
    torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 2.0))
    assert len(rec.graphs) == 2


def test_is_compiling_is_true_inside_capture():
    def fn(x):
        return x + 1 if torch.compiler.is_compiling() else x - 1

    compiled = tensorjit.compile(fn, backend="eager")
    torch.testing.assert_close(compiled(torch.zeros(1)), torch.ones(1))


def test_typing_cast_itemgetter_and_module_list_slices():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))

        def forward(self, x):
            for layer in typing.cast(torch.nn.ModuleList, self.layers[:2]):
                x = layer(x)
            return operator.itemgetter(0)([x, None])

    net = Net()
    rec, out, expected = one_graph(net, torch.randn(2, 4))
    torch.testing.assert_close(out, expected)
    assert len(rec.graphs) == 1


def test_try_except_followed_symbolically():
    def fn(x, table):
        try:
            scale = table["missing"]
        except KeyError:
            scale = 2.0
        return x * scale

    rec, out, expected = one_graph(fn, torch.ones(2), {"present": 1.0})
    torch.testing.assert_close(out, expected)
    assert len(rec.graphs) == 1


def test_break_in_a_loop_reuses_one_resume_function():
    seen = []

    def fn(x):
        for i in range(6):
            x = x * 2
            seen.append(x.sum().item())
        return x

    compiled = tensorjit.compile(fn, backend="eager")
    out = compiled(torch.ones(2))
    torch.testing.assert_close(out, torch.full((2,), 64.0))
    assert len(compiled._resume) <= 2  # one for the loop body, not one per iteration
