"""Arguments wrapped only when first read, so unused arguments add no guards."""

from __future__ import annotations

from typing import Any

from .base import Value


class LazyValue(Value):
    def __init__(self, obj: Any, source) -> None:
        self.obj = obj
        self.source = source

    def realize(self, tx) -> Value:
        return tx.wrap(self.obj, self.source)

    def reconstruct(self, cg) -> str:
        return cg.source(self.source)
