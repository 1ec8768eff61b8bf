"""operator's callable factories in Python: methodcaller (itemgetter and attrgetter have handlers)."""

from __future__ import annotations

import operator

from .registry import polyfill


@polyfill(operator.methodcaller, samples=[("upper",), ("split", ","), ("replace", "a", "b")])
def methodcaller(name, *args, **kwargs):
    def call_method(obj):
        return getattr(obj, name)(*args, **kwargs)
    return call_method
