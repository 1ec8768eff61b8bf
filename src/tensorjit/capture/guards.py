"""Guards: the assumptions a compiled entry relies on, checked before reuse.

Capture records `Guard`s as it reads values through `Source`s. `GuardSet.build`
turns them into one generated, straight-line Python function
`check(L) -> bool` over the bound arguments `L`, with the function's globals,
builtins and closure cells bound as defaults so that no lookup is repeated on
the hot path. Objects that a guard compares by identity are held through weak
references where Python allows it, so a compiled entry never keeps a module
alive; `GuardSet.on_death` tells the cache when such an object is gone.
"""

from __future__ import annotations

import builtins
import math
import sys
import types
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..runtime.persist import CompiledText, ModuleDict, NotPersistable, SavedCode, code_digest, dumps, loads
from .guard_kinds import GLOBAL_STATE, GUARD_KINDS, MODULE_HOOK_TABLES, HeldWeakly, tensor_signature_text  # noqa: F401 (tensor_signature_text: re-exported)
from . import native_guards
from .sources import AttrSource, ItemSource, Source, is_literal_key


def storages_unshared(written: tuple, tensors: tuple) -> bool:
    """No tensor of `written` shares its buffer with another of `tensors` (which holds them)."""
    native = native_guards.storages_unshared
    if native is not None:
        answer = native(written, tensors)
        if answer is not None:
            return answer
    pointers = [t.untyped_storage().data_ptr() for t in tensors]
    if len(set(pointers)) == len(pointers):  # the usual case, in one pass
        return True
    counts: dict[int, int] = {}
    for pointer in pointers:
        counts[pointer] = counts.get(pointer, 0) + 1
    return all(not pointer or counts[pointer] == 1
               for pointer in (t.untyped_storage().data_ptr() for t in written))


GUARDED_INPUTS = "tensorjit_guarded_inputs"
"""The key of a captured GraphModule's meta that holds, per graph input, the (shape, strides,
dtype, device) its tensor guard proves before every call, or None (capture/convert.py)."""


@dataclass(frozen=True)
class Guard:
    """One check on the value reached through `source`."""

    source: Source | None
    kind: str  # a name registered in guard_kinds.GUARD_KINDS: "type", "id", "constant", "tensor", ...
    payload: Any = None
    other: Source | None = None

    def __post_init__(self) -> None:
        if self.kind not in GUARD_KINDS:
            raise ValueError(f"unknown guard kind {self.kind!r} (guard_kinds.py registers the kinds)")

    def describe(self) -> str:
        where = str(self.source) if self.source is not None else "global state"
        return GUARD_KINDS[self.kind].describe(self, where)


@dataclass(frozen=True)
class TensorSignature:
    cls: type
    dtype: torch.dtype
    device: torch.device
    shape: tuple
    stride: tuple
    requires_grad: bool

    @staticmethod
    def of(t: torch.Tensor) -> "TensorSignature":
        return TensorSignature(type(t), t.dtype, t.device, tuple(t.shape), tuple(t.stride()),
                               t.requires_grad)


def global_state_guards() -> list[Guard]:
    return [Guard(None, "global_state", (text, read())) for text, _, read in GLOBAL_STATE]


class _Emitter:
    """Builds the text of the check function and the constants it closes over."""

    def __init__(self, in_instance_dict: Callable[[AttrSource], bool] | None = None, native=None) -> None:
        self.constants: dict[str, Any] = {}
        self.constant_names: dict[tuple[str, int], str] = {}
        """(prefix, id of the object) -> its name: an object named once (GPT-2's 240 constant guards
        named `int` and `float` 240 times, each a parameter of the check to compile)."""
        self.lines: list[str] = []
        self.weak: list[weakref.ref] = []
        self.cached: dict[Source, str] = {}
        self.in_instance_dict = in_instance_dict
        self.native = native
        """The native tensor check (`native_guards.TensorChecks`), or None: tensor guards in Python."""
        self.native_tensors: list[tuple[str, TensorSignature]] = []
        """(local, signature) of each tensor guard left to the native check (`_emit_native`)."""
        self.native_hooks: dict[tuple[str, ...], list[str]] = {}
        """Hook tables -> the instance dicts whose tables the native check tests empty (`_emit_native`)."""

    def defer_tensor(self, value: str, signature: TensorSignature) -> bool:
        """Leave this tensor guard to the native check (`_emit_native`), when there is one and
        it checks such a tensor."""
        if self.native is None or not native_guards.eligible(signature):
            return False
        self.native_tensors.append((value, signature))  # checked with the others in one call
        return True

    def defer_hooks(self, source: Source, tables: tuple[str, ...]) -> bool:
        """Leave the test that a module's hook `tables` are empty to the native check, when
        there is one and every table is read from the module's instance dict."""
        if self.native is None or not all(self.reads_dict(AttrSource(source, t)) for t in MODULE_HOOK_TABLES):
            return False
        self.native_hooks.setdefault(tables, []).append(self.dict_of(source))  # one call for all modules
        return True

    def constant(self, value: Any, prefix: str = "K") -> str:
        name = self.constant_names.get((prefix, id(value)))
        if name is not None:
            return name
        name = f"{prefix}{len(self.constants)}"
        self.constants[name] = value  # held: its id stays its own while names are given
        self.constant_names[(prefix, id(value))] = name
        return name

    def value_of(self, source: Source) -> str:
        """An expression for `source`, stored in a local when it is a path others build on."""
        if source in self.cached:
            return self.cached[source]
        base = source.base()
        if base is None:
            text = source.expression()
        elif isinstance(source, AttrSource) and self.reads_dict(source):
            text = f"{self.dict_of(base)}[{source.name!r}]"
        elif isinstance(source, AttrSource):
            of = self.value_of(base)
            text = f"{of}.{source.name}" if source.name.isidentifier() else f"getattr({of}, {source.name!r})"
        elif isinstance(source, ItemSource):
            key = repr(source.key) if is_literal_key(source.key) else self.constant(source.key)
            text = f"{self.value_of(base)}[{key}]"
        else:
            text = source.expression()
        name = f"v{len(self.cached)}"
        self.lines.append(f"    {name} = {text}")
        self.cached[source] = name
        return name

    def check(self, condition: str) -> None:
        self.lines.append(f"    if not ({condition}): return False")

    def reads_dict(self, source: AttrSource) -> bool:
        """Whether `source` is read from its object's instance dict: a subscript of a dict is
        about half the cost of an attribute load on an nn.Module (whose class defines
        __getattr__), and a module's guards read several of its attributes. Capture decides
        (`in_instance_dict`): the attribute was in the instance dict, no data descriptor of the
        (type-guarded) class shadows it. Where it has left the dict, the KeyError is a miss."""
        return self.in_instance_dict is not None and self.in_instance_dict(source)

    def dict_of(self, source: Source) -> str:
        key = ("__dict__", source)
        if key not in self.cached:
            name = f"v{len(self.cached)}"
            self.lines.append(f"    {name} = {self.value_of(source)}.__dict__")
            self.cached[key] = name
        return self.cached[key]


def _emit_guard(em: _Emitter, guard: Guard) -> None:
    v = em.value_of(guard.source) if guard.source is not None else None
    GUARD_KINDS[guard.kind].emit(em, guard, v)


@dataclass
class GuardSet:
    guards: list[Guard] = field(default_factory=list)
    _seen: set = field(default_factory=set)

    def add(self, guard: Guard) -> None:
        key = (guard.source, guard.kind, guard.other, _hashable(guard.payload))
        if key not in self._seen:
            self._seen.add(key)
            self.guards.append(guard)

    def ordered(self) -> list[Guard]:
        """Cheap checks first; a value's container is checked before its items; shape guards last."""
        def depth(g: Guard) -> int:
            n, s = 0, g.source
            while s is not None:
                n, s = n + 1, s.base()
            return n
        def rank(g: Guard) -> tuple:
            kind = GUARD_KINDS[g.kind]
            return kind.last, depth(g), kind.order
        return sorted(self.guards, key=rank)

    def build(self, fn_globals: dict, closure: tuple | None, with_parts: bool = True,
              saved=None, in_instance_dict=None,
              captured: Callable | None = None, native: Callable | None = None) -> "CompiledGuards":
        """with_parts: also one check per guard, for naming the guard that failed, built at the first
        failure (three quarters of the build's time, for entries that mostly never miss). The guards
        kept for it hold the objects of identity guards weakly, as the check does."""
        ordered = self.ordered() if captured is None else _collapse_tuples(self.ordered(), captured)
        check, text, weak, read, pending, natively = _compile_checks(ordered, fn_globals, closure, saved,
                                                                     in_instance_dict, native)
        guards = CompiledGuards(check, text, None if with_parts else [], weak, read=read, native=natively)
        kept = _held_weakly(ordered) if with_parts or pending else []
        if with_parts:
            guards.build_parts = lambda: [(g.describe(), _compile_checks([g], fn_globals, closure)[0],
                                           _explainer(g, fn_globals, closure)) for g in kept]
        if pending:
            guards.upgrade = _native_upgrade(kept, fn_globals, closure, in_instance_dict)
        return guards


def _held_weakly(guards: list[Guard]) -> list[Guard]:
    """`guards`, each identity guard's object held by a weak reference where it takes one."""
    kept = []
    for guard in guards:
        if guard.kind == "id" and not isinstance(guard.payload, HeldWeakly):
            try:
                guard = Guard(guard.source, "id", HeldWeakly(weakref.ref(guard.payload)), guard.other)
            except TypeError:  # not weakly referable: the check holds it too
                pass
        kept.append(guard)
    return kept


_FLAT_CONSTANTS = (int, float, str, bytes, bool, type(None))


def _collapse_tuples(guards: list[Guard], captured: Callable) -> list[Guard]:
    """A tuple of plain constants (a convolution's padding, a shape) is guarded as its type, its
    length and each item's value: here one "items" guard instead, on the tuple object capture
    read (`captured(source)`), which holds exactly when those guards all do. Only where the
    guards on the tuple and its items are exactly those (a guard filter may have dropped some)."""
    by_source: dict = {}
    for guard in guards:
        by_source.setdefault(guard.source, []).append(guard)
    tuples = {}
    for source, own in by_source.items():
        if source is None or sorted(g.kind for g in own) != ["length", "type"]:
            continue
        value = captured(source)
        if type(value) is not tuple or any(type(item) not in _FLAT_CONSTANTS for item in value):
            continue
        if all(_item_guards(by_source, source, index, item) for index, item in enumerate(value)):
            tuples[source] = value
    if not tuples:
        return guards
    items = {ItemSource(source, index) for source, value in tuples.items() for index in range(len(value))}
    kept = []
    for guard in guards:
        if guard.source in items:
            continue
        if guard.source in tuples:
            if guard.kind == "type":
                kept.append(Guard(guard.source, "items", tuples[guard.source]))
            continue
        kept.append(guard)
    return kept


def _item_guards(by_source: dict, source: Source, index: int, item) -> bool:
    own = by_source.get(ItemSource(source, index), [])
    return len(own) == 1 and own[0].kind == "constant" and own[0].payload is item


def same_items(value, expected: tuple) -> bool:
    """`value` is a tuple of the items of `expected`, each of the same type."""
    return type(value) is tuple and len(value) == len(expected) and all(
        a is b or type(a) is type(b) and a == b for a, b in zip(value, expected))


def _explainer(guard: Guard, fn_globals: dict, closure) -> Callable | None:
    """For a tensor guard: L -> what differs, in torch's words ("tensor 'x' size mismatch at index 0...")."""
    if guard.kind not in ("tensor", "tensor_dynamic"):
        return None
    em = _Emitter()
    value = em.value_of(guard.source)
    em.lines.append(f"    return {value}")
    read = _compile_function(em, fn_globals, closure, "read")[0]
    signature, name, dynamic = guard.payload, str(guard.source), guard.kind == "tensor_dynamic"
    return lambda L: tensor_mismatch(name, signature, read(L), dynamic)


def tensor_mismatch(name: str, expected: TensorSignature, actual: Any, dynamic: bool = False) -> str:
    """The first way `actual` differs from the tensor a guard expects, worded as torch's TENSOR_MATCH."""
    if type(actual) is not expected.cls:
        return f"tensor '{name}' type mismatch. expected {expected.cls.__name__}, actual {type(actual).__name__}"
    if actual.dtype != expected.dtype:
        return (f"tensor '{name}' dtype mismatch. expected {_dtype_name(expected.dtype)}, "
                f"actual {_dtype_name(actual.dtype)}")
    if actual.device != expected.device:
        return f"tensor '{name}' device mismatch. expected {expected.device}, actual {actual.device}"
    if actual.requires_grad != expected.requires_grad:
        return f"tensor '{name}' requires_grad mismatch. expected requires_grad={int(expected.requires_grad)}"
    if actual.dim() != len(expected.shape):
        return f"tensor '{name}' rank mismatch. expected {len(expected.shape)}, actual {actual.dim()}"
    if dynamic:
        return f"tensor '{name}' shape guard failed: sizes {list(actual.shape)}"
    for what, want, got in (("size", expected.shape, tuple(actual.shape)), ("stride", expected.stride, actual.stride())):
        for index, (w, g) in enumerate(zip(want, got)):
            if w != g:
                return f"tensor '{name}' {what} mismatch at index {index}. expected {w}, actual {g}"
    return f"tensor '{name}' matches"


def _dtype_name(dtype: torch.dtype) -> str:
    """c10's name of a dtype, as torch's guard messages print it (Float, Double, Half, Long...)."""
    try:
        return torch.empty((), dtype=dtype).type().split(".")[-1].replace("Tensor", "")
    except Exception:
        return str(dtype)


def _compile_checks(guards: list[Guard], fn_globals: dict, closure, saved=None, in_instance_dict=None,
                    native: Callable | None = None):
    """saved: the check's CompiledText from the warm-start cache, used when the text is the same.
    in_instance_dict: which attributes to read from their object's __dict__ (`_Emitter.reads_dict`).
    native: (number of tensor guards it could check) -> the native tensor check, or None where it
    is not built (yet); asked where `native_guards.MIN_TENSORS` or more tensors are guarded.
    Returns the check, its text, its weak references, what it reads, whether the native check
    was wanted but is not built yet (the check is then Python: `_native_upgrade`), and whether
    the check reads tensors through the native check."""
    em, pending = _emit_checks(guards, in_instance_dict, native)
    check, text = _compile_function(em, fn_globals, closure, "check", _CHECK_ENDING, saved)
    return check, text, em.weak, dict(em.cached), pending, bool(em.native_tensors)


def _emit_checks(guards: list[Guard], in_instance_dict, native: Callable | None) -> tuple["_Emitter", bool]:
    tensors = sum(g.kind == "tensor" and native_guards.eligible(g.payload) for g in guards)
    wanted = native is not None and tensors >= native_guards.MIN_TENSORS
    em = _Emitter(in_instance_dict, native(tensors) if wanted else None)
    for guard in guards:
        _emit_guard(em, guard)
    _emit_native(em)
    return em, wanted and em.native is None


def _native_upgrade(guards: list[Guard], fn_globals: dict, closure, in_instance_dict) -> Callable:
    """checks -> the check rebuilt with the native tensor check, for an entry captured while the
    extension was not built (`CompiledGuards.settle`). in_instance_dict reads capture's objects,
    which must not outlive capture: its answers are taken now, by emitting the native form once
    with a stand-in check (not compiled: most such entries are never upgraded). The guards are
    kept until the upgrade, the objects of identity guards weakly (`_held_weakly`), as the check
    holds them."""
    answers: dict = {}

    def record(source) -> bool:
        answers[source] = in_instance_dict is not None and in_instance_dict(source)
        return answers[source]
    _emit_checks(guards, record, lambda tensors: native_guards.STAND_IN)
    return lambda checks: _compile_checks(guards, fn_globals, closure, None,
                                          lambda source: answers.get(source, False), lambda tensors: checks)


_CHECK_ENDING = "    return True\n"


def _emit_native(em: _Emitter) -> None:
    """One check of every tensor left to the native check, after the other guards: they read no
    tensor's metadata, and where one raises on what the native check would refuse, a raise is a miss.
    Then one of the hook tables of every module whose tables are read from its instance dict."""
    if em.native_tensors:
        spec = em.constant(em.native.spec([sig for _, sig in em.native_tensors]), "N")
        em.check(f"_tensors_match({spec}, ({''.join(v + ', ' for v, _ in em.native_tensors)}))")
    for tables, dicts in em.native_hooks.items():
        em.check(f"_empty_entries(({''.join(d + ', ' for d in dicts)}), {tables!r})")


def _function_text(em: _Emitter, env: dict, name: str, ending: str) -> str:
    params = ", ".join(f"{k}={k}" for k in env)
    body = "\n".join(em.lines) or "    pass"
    return f"def {name}(L, {params}):\n{body}\n{ending}"


def _compile_function(em: _Emitter, fn_globals: dict, closure, name: str, ending: str = "",
                      saved=None) -> tuple[Callable, str]:
    """`def name(L, <constants and helpers as defaults>)` over the emitted lines, and its text."""
    env = _environment(em, fn_globals, closure)
    text = _function_text(em, env, name, ending)
    namespace: dict[str, Any] = {}
    code = saved.code() if saved is not None and saved.text == text else compile(text, "<tensorjit guards>", "exec")
    exec(code, env, namespace)
    return namespace[name], text


def _environment(em: _Emitter, fn_globals: dict, closure) -> dict:
    env = dict(em.constants)
    env.update(G=fn_globals, B=builtins.__dict__, C=closure or (), S=sys.modules)
    env.update((expression.removesuffix("()"), read) for _, expression, read in GLOBAL_STATE)
    body = "\n".join(em.lines)
    if em.native_tensors:
        env["_tensors_match"] = em.native.match
    if em.native_hooks:
        env["_empty_entries"] = em.native.empty_entries
    # math: ShapeEnv's guards on a symbolic float read `not math.isnan(...)`
    for name, helper in (("_storages_unshared", storages_unshared), ("_module_globals", torch.nn.modules.module),
                         ("math", math), ("_same_items", same_items)):
        if name in body:  # bound only where used: every parameter costs each call a little
            env[name] = helper
    return env


def saved_guards(guards: list[Guard], fn_globals: dict, closure, with_check: bool = True):
    """The guards pickled for the warm-start cache, as (bytes, modules named), or the
    NotPersistable that says why they cannot be.

    with_check: also the check's text and code as a later process builds them without the native
    tensor check (`load_guards` skips compile() where its text is the same). Capture leaves them
    out where its own check is native: the extension is then in the cache, a later process
    checks natively too and its text differs, and the check's compile() was a quarter of GPT-2's
    guard building.

    Identity guards name objects another process has too (classes, functions, modules, by
    reference). An nn.Module instance has no such name: its guard becomes one on its class;
    what capture read from it (parameters, buffers, attributes, submodules) is guarded through
    its own sources, and the parameters are graph inputs, read from the live module each call."""
    records = []
    try:
        for guard in guards:
            kind, payload = guard.kind, guard.payload
            if kind == "id" and isinstance(payload, types.FunctionType) and not _named(payload):
                records += _function_guards(guard.source, payload)
                continue
            if kind == "id":
                if isinstance(payload, torch.nn.Module):
                    kind, payload = "type", type(payload)
                elif isinstance(payload, dict):
                    name = payload.get("__name__")
                    if not isinstance(name, str) or getattr(sys.modules.get(name), "__dict__", None) is not payload:
                        raise NotPersistable(f"a guard on the identity of a dict ({guard.source})")
                    payload = ModuleDict(name)
                elif isinstance(payload, type(saved_guards.__code__)):
                    kind, payload = "code", SavedCode(code_digest(payload))
            records.append((guard.source, kind, payload, guard.other))
        if not with_check:
            return dumps((records, None))
        # The check as a later process builds it from these records (a module dict is itself there),
        # compiled now: that process then skips compile() when its text is the same.
        live = GuardSet()
        for source, kind, payload, other in records:
            live.add(Guard(source, kind, payload.live() if isinstance(payload, ModuleDict) else payload, other))
        em = _Emitter()
        for guard in live.ordered():
            _emit_guard(em, guard)
        text = _function_text(em, _environment(em, fn_globals, closure), "check", _CHECK_ENDING)
        return dumps((records, CompiledText(text, "<tensorjit guards>")))
    except NotPersistable as reason:
        return reason


def _named(fn: types.FunctionType) -> bool:
    """Whether another process finds `fn` by its module and qualified name (as pickle does)."""
    value = sys.modules.get(fn.__module__)
    for part in fn.__qualname__.split("."):
        value = getattr(value, part, None)
    return value is fn


_PLAIN_DEFAULTS = (type(None), bool, int, float, str)


def _function_guards(source: Source, fn: types.FunctionType) -> list[tuple]:
    """An identity guard on a function no name reaches (a decorated method's original, a closure's
    inner function), saved as what identity stood for: its code, its module and its defaults."""
    name = fn.__globals__.get("__name__")
    if fn.__closure__ or getattr(sys.modules.get(name), "__dict__", None) is not fn.__globals__:
        raise NotPersistable(f"a guard on the identity of function {fn.__qualname__} ({source})")
    for defaults in (fn.__defaults__ or (), (fn.__kwdefaults__ or {}).values()):
        if any(type(value) not in _PLAIN_DEFAULTS for value in defaults):
            raise NotPersistable(f"a guard on the identity of function {fn.__qualname__}, whose defaults "
                                 f"are objects ({source})")
    return [(source, "type", types.FunctionType, None),
            (AttrSource(source, "__code__"), "code", SavedCode(code_digest(fn.__code__)), None),
            (AttrSource(source, "__globals__"), "id", ModuleDict(name), None),
            (AttrSource(source, "__closure__"), "constant", None, None),
            (AttrSource(source, "__defaults__"), "constant", fn.__defaults__, None),
            (AttrSource(source, "__kwdefaults__"), "constant", fn.__kwdefaults__, None)]


def load_guards(data: bytes, fn_globals: dict, closure, native: Callable | None = None) -> "CompiledGuards":
    """Guards saved by `saved_guards`, built again over this process's function."""
    guard_set = GuardSet()
    records, check = loads(data)
    for source, kind, payload, other in records:
        guard_set.add(Guard(source, kind, payload, other))
    return guard_set.build(fn_globals, closure, saved=check, native=native)


@dataclass
class CompiledGuards:
    check: Callable[[tuple], bool]
    source_text: str
    parts: list[tuple[str, Callable, Callable | None]]  # (description, check, explain what differs)
    weak_refs: list[weakref.ref]
    saved: Any = None
    """(pickled guards, modules they name) for the warm-start cache, or why they cannot be saved."""
    build_parts: Callable | None = None
    """Builds `parts` when they are first needed (`GuardSet.build(with_parts=True)`)."""
    read: dict = field(default_factory=dict)
    """Source -> the local of `check` that holds its value once read (the fast path hands
    the graph inputs it read to the restore function instead of reading them again)."""
    upgrade: Callable | None = None
    """native check -> (check, text, weak refs, read) using it: set while the native tensor check
    is being built (capture/native_guards.py), so that capture does not wait for it."""
    native_built: Any = None
    """The native check, once built, for `settle` to take (set by the build's thread)."""
    native: bool = False
    """Whether `check` reads the tensors through the native tensor check."""

    def settle(self) -> None:
        """Take the native tensor check where it was built after capture. Called on the thread
        that runs the function, which then rebuilds its fast path."""
        if self.upgrade is not None and self.native_built is not None:
            self.check, self.source_text, self.weak_refs, self.read, _, self.native = self.upgrade(self.native_built)
            self.upgrade = self.native_built = None

    def all_parts(self) -> list[tuple[str, Callable, Callable | None]]:
        if self.parts is None:
            self.parts = self.build_parts()
        return self.parts

    @property
    def descriptions(self) -> list[str]:
        return [text for text, _, _ in self.all_parts()]

    def failure(self, L: tuple) -> str | None:
        """The first guard that fails for arguments `L`, described for logs (with the values that differ)."""
        for text, check, explain in self.all_parts():
            try:
                ok = check(L)
            except Exception:
                ok = False
            if not ok:
                try:
                    return explain(L) if explain is not None else text
                except Exception:
                    return text
        return None

    def alive(self) -> bool:
        return all(ref() is not None for ref in self.weak_refs)


def _hashable(value: Any) -> Any:
    try:
        hash(value)
        return value
    except TypeError:
        return id(value)
