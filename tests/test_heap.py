"""The heap is frozen while a compile runs, and given back after it (tensorjit/heap.py)."""

from __future__ import annotations

import gc

import pytest
import torch

import tensorjit


def _compiled_with_freeze_counts():
    seen = []

    def backend(gm, example_inputs):
        seen.append(gc.get_freeze_count())
        return gm.forward

    def fn(x):
        return (x.sin() + 1).relu()
    return tensorjit.compile(fn, backend=backend), seen


@pytest.fixture
def unfrozen_heap():
    """A heap with nothing frozen. A process may start with some objects frozen (the GPU machine's
    Python does: 375 at the first test), and then a compile leaves the heap alone."""
    frozen = gc.get_freeze_count()
    gc.unfreeze()
    yield
    if frozen:
        gc.freeze()


def test_a_compile_runs_on_a_frozen_heap_and_gives_it_back(unfrozen_heap):
    assert gc.get_freeze_count() == 0
    compiled, seen = _compiled_with_freeze_counts()
    x = torch.randn(8)
    torch.testing.assert_close(compiled(x), (x.sin() + 1).relu())
    assert len(seen) == 1 and seen[0] > 1000  # torch's modules and everything else made before
    assert gc.get_freeze_count() == 0


def test_a_heap_frozen_by_the_process_is_left_alone():
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        compiled, seen = _compiled_with_freeze_counts()
        compiled(torch.randn(8))
        # Nothing frozen in (objects made since would add to the count) nor given back (it would be
        # 0); frozen objects freed by their reference counts leave it, as they always do.
        assert len(seen) == 1 and before - 100 < seen[0] <= before
        assert before - 100 < gc.get_freeze_count() <= before
    finally:
        gc.unfreeze()


def test_nothing_is_frozen_when_collection_is_off(unfrozen_heap):
    gc.disable()
    try:
        compiled, seen = _compiled_with_freeze_counts()
        compiled(torch.randn(8))
        assert seen == [0]
    finally:
        gc.enable()
