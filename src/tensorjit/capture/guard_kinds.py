"""The kinds of guard: one registered `GuardKind` per kind, beside the code it emits.

A `Guard` (guards.py) names its kind by a string ("type", "tensor", ...), which is what
warm-start records and guard filters see. Everything the guard compiler needs to know about
a kind is registered here, in one place: how it is described in logs, the check it emits
into the generated guard function, where it is ordered among the other guards (cheap checks
first), and the name torch's guard filters know it by (`GuardEntry.guard_type`). Adding a
kind is one `@guard_kind` entry.

The emitters write into guards.py's `_Emitter` (its `check`, `constant`, `value_of`,
`dict_of`, `reads_dict` and `weak`): this module imports nothing of the guard compiler.
"""

from __future__ import annotations

import enum
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import torch

from .sources import AttrSource


@dataclass(frozen=True)
class GuardKind:
    """What the guard compiler knows of one kind of guard."""

    name: str
    order: int
    """Rank among the guards on paths of one depth: cheaper and more often failing checks first."""
    torch_type: str
    """The guard type guard_filter_fn sees (torch's GuardBuilder names: TYPE_MATCH, TENSOR_MATCH, ...)."""
    describe: Callable[[Any, str], str]
    """(guard, where its source reads) -> the text logs and recompile reasons show."""
    emit: Callable[[Any, Any, str | None], None]
    """(emitter, guard, the local holding the source's value, or None for a guard with no source)."""
    last: bool = False
    """Checked after every other guard, whatever its depth: it reads values the others proved."""


GUARD_KINDS: dict[str, GuardKind] = {}


def guard_kind(name: str, *, order: int, torch_type: str, describe: Callable[[Any, str], str],
               last: bool = False) -> Callable:
    """Registers the decorated emitter as kind `name`'s."""
    def register(emit: Callable) -> Callable:
        if name in GUARD_KINDS:
            raise ValueError(f"guard kind {name!r} is registered twice")
        GUARD_KINDS[name] = GuardKind(name, order, torch_type, describe, emit, last)
        return emit
    return register


# -- global torch state ------------------------------------------------------------------------------

# Global torch state an entry depends on: (description, expression, reader). The expression's
# function is bound by that name in the generated check (guards._environment).
GLOBAL_STATE = (
    ("torch.is_grad_enabled()", "_grad_enabled()", torch.is_grad_enabled),
    ("torch.is_inference_mode_enabled()", "_inference_mode()", torch.is_inference_mode_enabled),
    ("torch.get_default_dtype()", "_default_dtype()", torch.get_default_dtype),
    # Autocast changes the dtypes ops produce: an entry captured outside autocast is not valid inside.
    ("autocast enabled", "_autocast()", torch._C._is_any_autocast_enabled),
    # What a backend reads when it compiles (kernel choices, TF32 matmuls), as torch.compile's guards.
    ("torch.are_deterministic_algorithms_enabled()", "_deterministic()", torch.are_deterministic_algorithms_enabled),
    ("torch.backends.cuda.matmul.allow_tf32", "_cublas_tf32()", torch._C._get_cublas_allow_tf32),
)


@guard_kind("global_state", order=0, torch_type="GLOBAL_STATE",
            describe=lambda guard, where: f"{guard.payload[0]} == {guard.payload[1]!r}")
def _global_state(em, guard, v) -> None:
    text, value = guard.payload
    expression = next(e for t, e, _ in GLOBAL_STATE if t == text)
    em.check(f"{expression} is {em.constant(value)}" if isinstance(value, (bool, torch.dtype))
             else f"{expression} == {em.constant(value)}")


# -- identity and type -------------------------------------------------------------------------------

@guard_kind("type", order=1, torch_type="TYPE_MATCH",
            describe=lambda guard, where: f"type({where}) is {guard.payload.__qualname__}")
def _type(em, guard, v) -> None:
    em.check(f"type({v}) is {em.constant(guard.payload, 'T')}")


_weakrefable_failures = (TypeError,)


@dataclass(frozen=True)
class HeldWeakly:
    """An identity guard's object, by weak reference: for guards kept after capture (the
    per-guard checks built at the first miss), which must not keep alive what the check itself
    holds weakly."""

    ref: weakref.ref


@guard_kind("id", order=1, torch_type="ID_MATCH",
            describe=lambda guard, where: f"{where} is the same object as at capture")
def _id(em, guard, v) -> None:
    try:
        ref = guard.payload.ref if isinstance(guard.payload, HeldWeakly) else weakref.ref(guard.payload)
        em.weak.append(ref)
        em.check(f"{v} is {em.constant(ref, 'R')}()")
    except _weakrefable_failures:
        em.check(f"{v} is {em.constant(guard.payload, 'O')}")


@guard_kind("code", order=1, torch_type="ID_MATCH",
            describe=lambda guard, where: f"{where} is code equal to the code at capture")
def _code(em, guard, v) -> None:
    """A saved identity guard on a code object (runtime/persist.SavedCode)."""
    em.check(f"{em.constant(guard.payload, 'K')}.matches({v})")


@guard_kind("same", order=4, torch_type="OBJECT_ALIASING",
            describe=lambda guard, where: f"{where} is {guard.other}")
def _same(em, guard, v) -> None:
    em.check(f"{v} is {em.value_of(guard.other)}")


# -- values ------------------------------------------------------------------------------------------

_IMMUTABLE_CONSTANTS = frozenset({int, float, str, bytes, complex, torch.dtype, torch.device, torch.Size, range,
                                   slice, torch.memory_format, torch.layout, type(Ellipsis)})
"""Constants that cannot change while a guard holds them: the same object is an equal value."""


@guard_kind("constant", order=2, torch_type="EQUALS_MATCH",
            describe=lambda guard, where: f"{where} == {guard.payload!r}")
def _constant(em, guard, v) -> None:
    value = guard.payload
    if value is None or isinstance(value, bool):
        em.check(f"{v} is {value!r}")
    elif type(value) is float and value != value:  # NaN equals nothing, itself included
        em.check(f"type({v}) is float and math.isnan({v})")
    elif type(value) in _IMMUTABLE_CONSTANTS or isinstance(value, enum.Enum):
        # Mostly the very object read at capture (an attribute nobody assigned since):
        # identity first, the typed comparison only when it is another object.
        name = em.constant(value)
        em.check(f"{v} is {name} or type({v}) is {em.constant(type(value), 'T')} and {v} == {name}")
    else:
        em.check(f"type({v}) is {em.constant(type(value), 'T')} and {v} == {em.constant(value)}")


@guard_kind("items", order=2, torch_type="EQUALS_MATCH",
            describe=lambda guard, where: f"{where} == {guard.payload!r}, items of the same types")
def _items(em, guard, v) -> None:
    """A tuple of plain constants (guards._collapse_tuples): mostly the same object."""
    name = em.constant(guard.payload)
    em.check(f"{v} is {name} or _same_items({v}, {name})")


@guard_kind("length", order=2, torch_type="SEQUENCE_LENGTH",
            describe=lambda guard, where: f"len({where}) == {guard.payload}")
def _length(em, guard, v) -> None:
    em.check(f"len({v}) == {guard.payload}")


@guard_kind("at_least", order=2, torch_type="SEQUENCE_LENGTH",
            describe=lambda guard, where: f"{where} >= {guard.payload}")
def _at_least(em, guard, v) -> None:
    """An int that may grow: a loop iterator with that many items left, or more."""
    em.check(f"{v} >= {guard.payload}")


@guard_kind("missing_attribute", order=2, torch_type="HASATTR",
            describe=lambda guard, where: f"{where} has no attribute {guard.payload!r}")
def _missing_attribute(em, guard, v) -> None:
    """hasattr() answered False, getattr() took its default."""
    em.check(f"not hasattr({v}, {guard.payload!r})")


@guard_kind("absent_key", order=2, torch_type="DICT_CONTAINS",
            describe=lambda guard, where: f"{guard.payload!r} not in {where}")
def _absent_key(em, guard, v) -> None:
    """An instance __dict__ without the name, so lookup reached the class's Python __getattr__."""
    em.check(f"{guard.payload!r} not in {v}")


@guard_kind("keys", order=2, torch_type="DICT_KEYS_MATCH",
            describe=lambda guard, where: f"{where}.keys() == {list(guard.payload)!r}")
def _keys(em, guard, v) -> None:
    em.check(f"list({v}.keys()) == {em.constant(list(guard.payload))}")


@guard_kind("set_items", order=2, torch_type="EQUALS_MATCH",
            describe=lambda guard, where: f"list({where}) == {list(guard.payload)!r}")
def _set_items(em, guard, v) -> None:
    """The items and their iteration order (equal sets may iterate differently)."""
    em.check(f"list({v}) == {em.constant(list(guard.payload))}")


# -- tensors -----------------------------------------------------------------------------------------

def tensor_signature_text(sig) -> str:
    """A guards.TensorSignature as logs show it."""
    return (f"{sig.cls.__name__}(dtype={sig.dtype}, device={sig.device}, shape={list(sig.shape)}, "
            f"stride={list(sig.stride)}, requires_grad={sig.requires_grad})")


@guard_kind("tensor", order=3, torch_type="TENSOR_MATCH",
            describe=lambda guard, where: f"{where}: tensor {tensor_signature_text(guard.payload)}")
def _tensor(em, guard, v) -> None:
    sig = guard.payload
    if em.defer_tensor(v, sig):
        return
    device = f"{v}.is_cpu" if sig.device.type == "cpu" else f"{v}.device == {em.constant(sig.device)}"
    grad = f"{v}.requires_grad" if sig.requires_grad else f"not {v}.requires_grad"
    em.check(f"type({v}) is {em.constant(sig.cls, 'T')} and {v}.dtype is {em.constant(sig.dtype)} and "
             f"{grad} and {v}.shape == {em.constant(sig.shape)}{_strides_test(em, v, sig)} and {device}")


@guard_kind("tensor_dynamic", order=3, torch_type="TENSOR_MATCH",
            describe=lambda guard, where: f"{where}: tensor with dynamic sizes, "
                                          f"{tensor_signature_text(guard.payload)}")
def _tensor_dynamic(em, guard, v) -> None:
    """Sizes and strides are checked by the shape guards."""
    sig = guard.payload
    device = f"{v}.is_cpu" if sig.device.type == "cpu" else f"{v}.device == {em.constant(sig.device)}"
    grad = f"{v}.requires_grad" if sig.requires_grad else f"not {v}.requires_grad"
    em.check(f"type({v}) is {em.constant(sig.cls, 'T')} and {v}.dtype is {em.constant(sig.dtype)} and "
             f"{grad} and {v}.dim() == {len(sig.shape)} and {device}")


def _strides_test(em, v: str, sig) -> str:
    """Given the shape, the test that the strides are the signature's. With every size at least
    2, the contiguous strides are the only ones is_contiguous() accepts (half the cost of
    building and comparing the strides tuple); a 0-dim tensor has no strides to test."""
    if not sig.shape:
        return ""
    if min(sig.shape) >= 2 and tuple(sig.stride) == _contiguous_strides(sig.shape):
        return f" and {v}.is_contiguous()"
    return f" and {v}.stride() == {em.constant(sig.stride)}"


def _contiguous_strides(shape: tuple) -> tuple:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def _describe_aliasing(guard, where: str) -> str:
    (written, inputs), unshared = guard.payload
    names = ", ".join(map(str, written))
    return f"{names} {'share' if unshared else 'shares'} memory with {'no' if unshared else 'another'} input"


@guard_kind("aliasing", order=5, last=True, torch_type="NO_TENSOR_ALIASING", describe=_describe_aliasing)
def _aliasing(em, guard, v) -> None:
    """Inputs the graph writes to share memory with no other input (or do, as they did at capture)."""
    (written, inputs), unshared = guard.payload
    written_text = "".join(f"{em.value_of(s)}, " for s in written)
    inputs_text = "".join(f"{em.value_of(s)}, " for s in inputs)
    em.check(f"_storages_unshared(({written_text}), ({inputs_text})) is {unshared}")


@guard_kind("expression", order=5, last=True, torch_type="SHAPE_ENV",
            describe=lambda guard, where: f"shape guard {guard.payload}")
def _expression(em, guard, v) -> None:
    """A ShapeEnv guard, already Python over the sources' values."""
    em.check(guard.payload)


# -- module hooks ------------------------------------------------------------------------------------

MODULE_HOOK_TABLES = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_GLOBAL_HOOK_TABLES = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                       "_global_backward_pre_hooks")


def _hook_table(em, source, value: str, table: str) -> str:
    attribute = AttrSource(source, table)
    return f"{em.dict_of(source)}[{table!r}]" if em.reads_dict(attribute) else f"{value}.{table}"


@guard_kind("no_hooks", order=2, torch_type="NN_MODULE_HOOKS",
            describe=lambda guard, where: f"{where} has no hooks")
def _no_hooks(em, guard, v) -> None:
    """An inlined module: a hook added later must recompile."""
    if em.defer_hooks(guard.source, MODULE_HOOK_TABLES):
        return
    em.check("not (" + " or ".join(_hook_table(em, guard.source, v, t) for t in MODULE_HOOK_TABLES) + ")")


@guard_kind("no_backward_hooks", order=2, torch_type="NN_MODULE_HOOKS",
            describe=lambda guard, where: f"{where} has no backward hooks")
def _no_backward_hooks(em, guard, v) -> None:
    """A module whose forward hooks were inlined."""
    if em.defer_hooks(guard.source, MODULE_HOOK_TABLES[2:]):
        return
    em.check("not (" + " or ".join(_hook_table(em, guard.source, v, t) for t in MODULE_HOOK_TABLES[2:]) + ")")


@guard_kind("no_global_hooks", order=0, torch_type="NN_MODULE_HOOKS",
            describe=lambda guard, where: "no global module hooks")
def _no_global_hooks(em, guard, v) -> None:
    """register_module_forward_hook & co."""
    em.check("not (" + " or ".join(f"_module_globals.{t}" for t in _GLOBAL_HOOK_TABLES) + ")")


@guard_kind("no_global_backward_hooks", order=0, torch_type="NN_MODULE_HOOKS",
            describe=lambda guard, where: "no global backward hooks")
def _no_global_backward_hooks(em, guard, v) -> None:
    em.check("not (" + " or ".join(f"_module_globals.{t}" for t in _GLOBAL_HOOK_TABLES[2:]) + ")")
