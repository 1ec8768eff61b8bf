"""typing's introspection read at capture time: `typing.get_type_hints(cls)` of a class known then.

The typing module is not traced (skipfiles); its answers about a class depend on the class's
annotations and the names they refer to, fixed once the class is made, so capture evaluates the
call (a graph break only where an argument is not known at capture time).
"""

from __future__ import annotations

import typing

from ..breaks import GraphBreak
from ..values.base import Value
from .registry import capture_rule


def _all_known(args, kwargs) -> bool:
    return all(v.is_constant() for v in [*args, *kwargs.values()])


@capture_rule(typing.get_type_hints, applies=_all_known)
def _get_type_hints(tx, *args: Value, **kwargs: Value) -> Value:
    try:
        hints = typing.get_type_hints(*[a.constant() for a in args], **{k: v.constant() for k, v in kwargs.items()})
    except Exception as e:  # the program's own error (a name an annotation refers to is missing)
        raise GraphBreak("op-error", f"typing.get_type_hints raised {type(e).__name__}: {e}", exception=e) from None
    return tx.wrap_constant_object(hints)
