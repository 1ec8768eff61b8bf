"""A kernel remembers the buffers it reads (`memory.names_read`): the scheduler, the memory
planner and the Triton passes ask it of the same kernels many times, and each answer walked the
kernel's body (a fifth of GPT-2's code generation)."""

from __future__ import annotations

import dataclasses
import pickle

from tensorjit.codegen import ir, memory


def _load(buffer: str) -> ir.Load:
    return ir.Load(buffer, ir.IndexVar("i0"), "float32")


def _kernel(name: str, *buffers: str) -> ir.Pointwise:
    body = ir.Op("add", tuple(_load(b) for b in buffers), "float32")
    return ir.Pointwise(name, f"out_{name}", (8,), body, (ir.IndexVar("i0"),))


def test_the_body_is_walked_once(monkeypatch):
    kernel = _kernel("k", "a", "b")
    walks = []
    original = memory.expression_loads
    monkeypatch.setattr(memory, "expression_loads", lambda expr: walks.append(expr) or original(expr))
    assert memory.names_read(kernel) == {"a", "b"}
    assert memory.names_read(kernel) == {"a", "b"}
    assert len(walks) == 1


def test_groups_remember_what_their_members_read_from_memory():
    first, second = _kernel("k1", "a", "b"), _kernel("k2", "out_k1", "c")
    group = ir.LoopGroup("g", (8,), (ir.IndexVar("i0"),), (first, second))
    assert memory.names_read(group) == {"a", "b", "c"}
    assert memory.names_read(group) is memory.names_read(group)


def test_a_replaced_kernel_reads_its_own_body():
    kernel = _kernel("k", "a")
    assert memory.names_read(kernel) == {"a"}
    changed = dataclasses.replace(kernel, body=_load("z"))
    assert memory.names_read(changed) == {"z"}


def test_the_remembered_reads_change_no_equality_repr_or_pickle():
    remembered, fresh = _kernel("k", "a"), _kernel("k", "a")
    memory.names_read(remembered)
    assert remembered == fresh and hash(remembered) == hash(fresh) and repr(remembered) == repr(fresh)
    assert pickle.loads(pickle.dumps(remembered)) == fresh


def test_externs_read_their_buffer_arguments():
    extern = ir.Extern("e", "target", (ir.BufferRef("a"), 3), (("other", ir.BufferRef("b")),), "out")
    assert memory.names_read(extern) == {"a", "b"}
