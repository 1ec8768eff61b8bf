"""The `re` module's functions on constant patterns and text, answered at capture time.

re.compile and the module-level helpers (search, match, ...) are Python functions that reach
sre's C parser and compiler through a cache; tracing them breaks deep inside the parser. Their
results depend on the arguments alone (the cache is not observable), and a compiled pattern and
a match are immutable, their C methods folded like a string's (values/builtins.py `_IMMUTABLE`).
So with constant arguments the call runs now and its result is a constant; otherwise (a
callable replacement, symbolic text) the call takes the ordinary path.
"""

from __future__ import annotations

import re

from ..breaks import GraphBreak
from ..values.base import Value
from .registry import capture_rule


def _constant_arguments(args, kwargs) -> bool:
    return all(v.is_constant() and not callable(v.constant()) for v in [*args, *kwargs.values()])


def _fold(fn):
    def rule(tx, *args: Value, **kwargs: Value) -> Value:
        try:
            result = fn(*[a.constant() for a in args], **{k: v.constant() for k, v in kwargs.items()})
        except (re.error, TypeError, ValueError) as error:  # a bad pattern: the program's exception
            raise GraphBreak("op-error", f"re.{fn.__name__} raised {type(error).__name__}: {error}",
                             exception=error) from None
        return tx.wrap_constant_object(result)
    return rule


for _fn in (re.compile, re.search, re.match, re.fullmatch, re.findall, re.sub, re.subn, re.split, re.escape):
    capture_rule(_fn, applies=_constant_arguments)(_fold(_fn))
