"""Sources remember their hash (`sources.source_record`): a chain of records is hashed once,
equality still compares fields, and copies and pickles leave the remembered hash out."""

import copy
import pickle

from tensorjit.capture.dynamic import SizeSource
from tensorjit.capture.sources import AttrSource, ItemSource, LocalSource, Source


class CountedKey:
    """An item key that counts how often it is hashed."""

    hashed = 0

    def __hash__(self) -> int:
        CountedKey.hashed += 1
        return 7

    def __eq__(self, other) -> bool:
        return isinstance(other, CountedKey)


def test_a_chain_is_hashed_once():
    CountedKey.hashed = 0
    source = AttrSource(AttrSource(ItemSource(LocalSource(0, "x"), CountedKey()), "weight"), "data")
    first = hash(source)
    for _ in range(5):
        assert hash(source) == first
    assert hash(AttrSource(source, "grad")) == hash(AttrSource(source, "grad"))
    assert CountedKey.hashed == 1


def test_equal_records_hash_equal_and_compare_by_fields():
    a = AttrSource(ItemSource(LocalSource(0, "x"), 3), "weight")
    b = AttrSource(ItemSource(LocalSource(0, "x"), 3), "weight")
    hash(a)  # one remembered, the other not
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    assert a != AttrSource(ItemSource(LocalSource(0, "x"), 4), "weight")
    assert SizeSource(a, 1) == SizeSource(b, 1) and hash(SizeSource(a, 1)) == hash(SizeSource(b, 1))


def test_copies_and_pickles_leave_the_hash_out():
    source = AttrSource(LocalSource(0, "x"), "weight")
    hash(source)
    for other in (pickle.loads(pickle.dumps(source)), copy.copy(source), copy.deepcopy(source)):
        assert other == source and hash(other) == hash(source)
    assert "_hash" in Source.__slots__ and not hasattr(pickle.loads(pickle.dumps(source)), "_hash")
