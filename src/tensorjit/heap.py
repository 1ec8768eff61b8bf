"""The Python heap while a compile runs: its objects frozen, so that a full collection skips them.

    with frozen_heap(): ...   # a capture and its backend (api.py)

A compile allocates hundreds of thousands of objects (FX nodes, fake tensors, IR), which sets off
Python's full collections; each traverses the whole heap, which torch and a model's library make
large (GPT-2 training's first call, 2-core machine: two full collections of ~0.2 s CPU each, 0.5 s of
collection in all). `gc.freeze()` before the compile moves the objects that exist into the permanent
generation: collections during the compile traverse only what the compile made (~0.02 s each).
`gc.unfreeze()` after it hands them back to the oldest generation, where the next full collection
sees them as before: nothing is kept alive, garbage made before the compile is collected after it
rather than during it. Measured over the first call, five more training steps and a final
`gc.collect()`: 0.75 -> 0.35 s of collection (docs/performance.md, "CPU: GPT-2 training's joint graph
traced once").

A process that froze objects itself (a server before forking) is left alone: only a heap with no
frozen object is frozen, and unfrozen; a compile inside a compile (nothing frozen then from outside)
leaves the outer one's to it. (The H100 machine's Python starts with 375 objects frozen by something
before tensorjit is imported, so there a compile does not freeze: not measured what that costs.)
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    if gc.get_freeze_count() or not gc.isenabled():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
