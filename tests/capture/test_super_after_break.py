"""A zero-argument super() after a graph break: the method's first argument travels ahead of the
stack into the resume function's first local slot, where super() reads it on 3.11 (resume.py
`moves_first_argument`)."""

import torch

import tensorjit
from conformance.harness import CountingBackend


class Scaled(torch.nn.Linear):
    def forward(self, x):
        x = x * 2
        print("break")
        return super().forward(x) + 1


class Base:
    coeff = 4

    @classmethod
    def add(cls, x):
        return x + 1


class Child(Base):
    @classmethod
    def add(cls, x):
        torch._dynamo.graph_break()
        return x + super().add(x) + super().coeff


class Twice(torch.nn.Linear):
    def forward(self, x):
        y = torch.relu(x)
        total = y.sum() + super().forward(y).sum(dim=-1, keepdim=True) * (print("first") or 1)
        print("second")
        return super().forward(x) + total


def test_super_in_forward_after_a_break():
    module = Scaled(3, 3)
    backend = CountingBackend()
    opt = tensorjit.compile(module, backend=backend)
    for _ in range(3):
        x = torch.randn(2, 3)
        torch.testing.assert_close(opt(x), module(x))
    assert backend.graph_count == 2


def test_super_in_a_classmethod_after_a_break():
    def fn(x, obj):
        return x + obj.add(x)

    x = torch.rand(3)
    opt = tensorjit.compile(fn, backend="eager")
    torch.testing.assert_close(opt(x, Child()), fn(x, Child()))
    torch.testing.assert_close(opt(x, Child()), fn(x, Child()))


def test_super_after_two_breaks_one_with_values_on_the_stack():
    module = Twice(3, 3)
    opt = tensorjit.compile(module, backend="eager")
    for _ in range(2):
        x = torch.randn(2, 3)
        torch.testing.assert_close(opt(x), module(x))
