"""The table of NumPy functions capture traces: each numpy callable and its torch._numpy twin.

torch._numpy implements NumPy's API on torch tensors, name for name. The table pairs every
callable of numpy, numpy.linalg and numpy.fft with the torch._numpy callable of the same name
(`table()`, built once at first use); `resolve` hands capture a rule for a call of any of them:

- all arguments known at capture time (`np.issubdtype(type(n), np.integer)`, `np.finfo(np.float32)`,
  `np.float64(2)`): NumPy itself answers, then and there, as eager would; an array it makes is a
  constant of the graph, copied on each call;
- otherwise the call is one graph node running the torch._numpy function
  (capture/values/numpy.py, `record_numpy_call`), its arrays `NumpyArrayValue`s.

numpy.random is left out of the table on purpose: torch._numpy draws from torch's generator, so
a traced call would give other numbers than NumPy's stream; such calls are graph breaks and run
eagerly. With `config.trace_numpy_random` (torch.compile's default behaviour), numpy.random's
module functions that torch._numpy.random has are traced through it instead (`_random_call`),
never folded at capture time; a RandomState's or Generator's methods, and seeding, still break.
tests/capture/test_numpy.py checks that the table covers torch._numpy.
"""

from __future__ import annotations

import functools
from typing import Any

from ..breaks import GraphBreak
from ..values.base import Value
from ..values.numpy import constant_array, is_ndarray, numpy, record_numpy_call, torch_numpy
from ..values.tensors import TensorValue
from .registry import Polyfill, family

_MODULES = ("", "linalg", "fft")
"""numpy's namespaces traced through torch._numpy ('' is numpy itself)."""

_LEFT_OUT = {"ndarray", "dtype", "DType", "set_default_dtype", "AxisError", "UFuncTypeError", "from_dlpack"}
"""torch._numpy names that are no NumPy function to trace (classes of its own, its global setting)."""


@functools.cache
def table() -> dict[Any, tuple[str, Any]]:
    """numpy callable -> (its qualified name, the torch._numpy callable of that name)."""
    if numpy is None:
        return {}
    tnp = torch_numpy()
    pairs: dict[Any, tuple[str, Any]] = {}
    for module_name in _MODULES:
        ours = getattr(tnp, module_name) if module_name else tnp
        theirs = getattr(numpy, module_name) if module_name else numpy
        for name in dir(ours):
            if name.startswith("_") or name in _LEFT_OUT:
                continue
            implementation, target = getattr(ours, name), getattr(theirs, name, None)
            if not callable(implementation) or not callable(target) or isinstance(implementation, type(tnp)):
                continue
            try:
                hash(target)
            except TypeError:
                continue
            pairs.setdefault(target, (f"{module_name + '.' if module_name else ''}{name}", implementation))
    return pairs


@family
def resolve(target: Any) -> Polyfill | None:
    if numpy is None:
        return None
    try:
        found = table().get(target)
    except TypeError:
        return None
    if found is None:
        if _is_numpy_random(target):
            return Polyfill(target, functools.partial(_random_call, target), False)
        return None
    name, implementation = found
    return Polyfill(target, functools.partial(_numpy_call, target, name, implementation), False)


def _is_numpy_random(target: Any) -> bool:
    owner = getattr(target, "__self__", None)
    return isinstance(owner, (numpy.random.RandomState, numpy.random.Generator)) or \
        getattr(target, "__module__", "") in ("numpy.random", "numpy.random.mtrand")


def _random_call(target, tx, *args: Value, **kwargs: Value) -> Value:
    twin, args = _torch_random_twin(target, args) if tx.config.trace_numpy_random else (None, args)
    if twin is None:
        raise GraphBreak("numpy", "numpy.random draws from NumPy's own generator, which the graph cannot advance",
                         "it runs eagerly, so the numbers are NumPy's (config.trace_numpy_random=True draws "
                         "from torch's generator in the graph, as torch.compile does)")
    return record_numpy_call(tx, twin, list(args), dict(kwargs), f"random_{target.__name__}")


_SEEDING = {"seed"}
"""numpy.random functions that set the stream instead of drawing from it: they run eagerly."""


def _torch_random_twin(target: Any, args: tuple) -> tuple[Any, tuple]:
    """(torch._numpy.random's function of `target`'s name, the call's arguments without the state)
    for numpy.random's module functions, which are methods of its global RandomState (called bound,
    or unbound with that state first); (None, args) for anything else. The twin is undecorated: its
    wrapper asks torch._dynamo's config at every call which stream to use."""
    torch_random = torch_numpy().random  # torch._numpy imports its random module
    name = getattr(target, "__name__", "")
    state = numpy.random.mtrand._rand
    if getattr(target, "__self__", None) is state:
        found = getattr(numpy.random, name, None) == target
    elif args and getattr(args[0], "obj", None) is state and getattr(type(state), name, None) is target:
        found, args = True, args[1:]
    else:
        found = False
    twin = getattr(torch_random, name, None) if found and name not in _SEEDING and not name.startswith("_") else None
    if twin is None or not callable(twin):
        return None, args
    return getattr(twin, "__wrapped__", twin), args


def _numpy_call(target, name: str, implementation, tx, *args: Value, **kwargs: Value) -> Value:
    values = [*args, *kwargs.values()]
    if all(v.is_constant() for v in values):
        return _fold(tx, target, name, args, kwargs)
    if any(type(v) is TensorValue and v.example.requires_grad for v in values):
        error = RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        raise GraphBreak("op-error", str(error), exception=error)
    return record_numpy_call(tx, implementation, list(args), dict(kwargs), name.replace(".", "_"))


def _fold(tx, target, name: str, args, kwargs) -> Value:
    """A NumPy call on constants: NumPy answers at capture time (its functions here are pure)."""
    try:
        result = target(*[a.constant() for a in args], **{k: v.constant() for k, v in kwargs.items()})
    except Exception as e:  # the program's own error, raised where eager raises it
        raise GraphBreak("op-error", f"numpy.{name} raised {type(e).__name__}: {e}", exception=e) from None
    if is_ndarray(result):
        return constant_array(tx, result)
    return tx.wrap_constant_object(result)

