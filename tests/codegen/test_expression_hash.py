"""Expression nodes remember their hash: a shared subtree is hashed once, not once per path to it.

Lowering shares values (one load read in several places), so expression trees are DAGs;
a hash computed anew at each level visited every shared subtree once per path, which grew
with 2**depth and was most of ResNet-18's cold compile (30 million hash calls)."""

from __future__ import annotations

import pickle

from tensorjit.codegen import ir


class CountedLeaf:
    """A hashable leaf that counts how often it is hashed."""

    def __init__(self) -> None:
        self.hashes = 0

    def __hash__(self) -> int:
        self.hashes += 1
        return 7

    def __eq__(self, other) -> bool:
        return isinstance(other, CountedLeaf)


def _shared_chain(leaf, depth: int):
    node = ir.Op("neg", (leaf,), "float32")
    for _ in range(depth):
        node = ir.Op("add", (node, node), "float32")  # each level reads the one below twice
    return node


def test_shared_subtrees_are_hashed_once():
    leaf = CountedLeaf()
    top = _shared_chain(leaf, 20)
    first = hash(top)
    assert hash(top) == first
    assert leaf.hashes == 1  # 2**20 without the remembered hash


def test_index_nodes_remember_their_hash():
    index = ir.IndexOp("add", ir.IndexVar("x"), ir.IndexConst(1))
    for node in (index, ir.IndirectIndex(ir.Load("b", index, "int64"), 4), ir.Load("a", index, "float32"),
                 ir.IndexValue(index, "int64")):
        hash(node)
        assert node._hash is not None


def test_equal_nodes_hash_equal_and_the_field_is_not_compared():
    build = lambda: ir.Op("add", (ir.Load("a", ir.IndexOp("mul", ir.IndexVar("x"), ir.IndexConst(4)), "float32"),
                                  ir.Constant(1.0, "float32")), "float32")
    first, second = build(), build()
    hash(first)  # one remembers its hash, the other not yet
    assert first == second and hash(first) == hash(second)
    assert {first: 1}[second] == 1
    assert "_hash" not in repr(first)


def test_pickled_nodes_compute_their_hash_again():
    node = ir.Op("exp", (ir.Load("a", ir.IndexVar("x"), "float32"),), "float32")
    hash(node)
    copy = pickle.loads(pickle.dumps(node))
    assert copy == node and copy._hash is None  # string hashes differ between processes
    assert hash(copy) == hash(node)


def test_walks_visit_shared_subtrees_once():
    """expression_loads and reads_indirectly walk a DAG in time linear in its nodes: a chain of
    16 shared levels has 65,536 paths, each once read before."""
    from tensorjit.codegen.memory import expression_loads

    load = ir.Load("a", ir.IndexVar("x"), "float32")
    node = ir.Op("neg", (load,), "float32")
    for _ in range(16):
        node = ir.Op("add", (node, node), "float32")
    assert expression_loads(node) == [load]
    assert not ir.reads_indirectly(node)
    indirect = ir.Load("b", ir.IndirectIndex(load, 4), "float32")
    assert ir.reads_indirectly(ir.Op("add", (node, indirect), "float32"))
    assert expression_loads(ir.Op("add", (node, indirect), "float32")) == [indirect, load]
