"""One handler per CPython opcode, registered with the Python versions it serves.

Each handler takes the frame and the instruction and updates the frame's
stack, locals and instruction pointer. Registration refuses duplicates, and
an opcode with no handler for the running Python is a graph break.
"""

from __future__ import annotations

import operator
import types
from typing import TYPE_CHECKING, Callable

import torch

from . import cpython
from .breaks import GraphBreak
from .capture_state import Return, handled_exception
from .contextmanagers import Suspended
from .cpython import CALL_ADAPTER, FROM_312, FROM_313, PY, PY311, PY312, PY313, PY314, UP_TO_312
from .generators import GeneratorValue
from .sources import TensorKeySource
from .values.base import ConstantValue, NULL, NullValue, UNBOUND, Value
from .values.lazy import LazyValue
from .values.builtins import BuiltinValue, object_text
from .values.containers import (ContainerMethodValue, DictValue, IteratorValue, ListValue, SequenceValue,
                                SetValue, SliceValue, TupleValue, hash_key)
from .values.functions import FunctionValue, MethodValue, NestedFunctionValue
from .values.objects import (NOT_PLAIN, GradModeValue, NNModuleValue, ObjectValue, SuperValue, UserObjectValue,
                             lookup_static, plain_object)
from .values.records import RecordValue
from .values.subclass_instances import subscript_method
from .values.tensors import LazyTextValue, SymbolicIntValue, TensorValue, lazy_text, record_call

if TYPE_CHECKING:
    from .interpreter import Frame, Instruction

HANDLERS: dict[str, Callable[[Frame, Instruction], None]] = {}


def opcode(*versions: tuple[int, int], name: str | None = None):
    """Register the decorated function as the handler of the opcode it is named after (or `name`)."""
    def register(fn):
        if versions and PY not in versions:
            return fn
        opname = name or fn.__name__
        if opname in HANDLERS:
            raise AssertionError(f"duplicate handler for {opname}")
        HANDLERS[opname] = fn
        return fn
    return register


# -- stack and no-ops ------------------------------------------------------------------
@opcode()
def NOP(f: Frame, i: Instruction) -> None:
    pass


@opcode()
def RESUME(f, i):
    pass


@opcode()
def POP_TOP(f, i):
    f.pop()


@opcode()
def PUSH_NULL(f, i):
    f.push(NULL)


@opcode()
def COPY(f, i):
    f.push(f.stack[-i.arg])


@opcode()
def SWAP(f, i):
    f.stack[-1], f.stack[-i.arg] = f.stack[-i.arg], f.stack[-1]


@opcode(PY312)
def END_FOR(f, i):
    f.popn(2)


@opcode(*FROM_313)
def END_FOR(f, i):  # noqa: F811 (3.13: a POP_TOP follows and pops the iterator)
    f.pop()


# -- locals, globals, cells -------------------------------------------------------------
@opcode()
def LOAD_CONST(f, i):
    f.push(f.wrap_constant_object(i.argval))


@opcode(PY312, PY313)
def RETURN_CONST(f, i):
    _return(f, f.wrap_constant_object(i.argval))


@opcode()
def LOAD_FAST(f, i):
    _load_fast(f, i.argval)


def _load_fast(f: Frame, name: str) -> None:
    value = f.locals.get(name)
    if value is None and cpython.NULL_AFTER_CALLABLE and name in f.cells:
        f.push(f.cells[name])  # 3.13 compiles LOAD_CLOSURE (a closure's cell) as LOAD_FAST
        return
    if value is None:
        raise GraphBreak("unbound-local", f"local variable {name!r} referenced before assignment")
    if type(value) is LazyValue:
        value = f.locals[name] = value.realize(f)
    f.push(value)


opcode(*FROM_312, name="LOAD_FAST_CHECK")(LOAD_FAST)


@opcode(*FROM_312)
def LOAD_FAST_AND_CLEAR(f, i):
    value = f.locals.pop(i.argval, UNBOUND)
    if type(value) is LazyValue:
        value = value.realize(f)
    f.push(value)


def _is_null(value: Value) -> bool:
    """NULL, or the stand-in that generated code pushes for it (see CALL_ADAPTER)."""
    return isinstance(value, NullValue) or isinstance(value, ObjectValue) and value.obj is CALL_ADAPTER


@opcode()
def STORE_FAST(f, i):
    _store_fast(f, i.argval, f.pop())


def _store_fast(f: Frame, name: str, value: Value) -> None:
    if _is_null(value):  # 3.12+ comprehensions restore an unbound variable this way
        f.locals.pop(name, None)
    else:
        f.locals[name] = value


@opcode(*FROM_313)
def LOAD_FAST_LOAD_FAST(f, i):
    first, second = i.argval
    _load_fast(f, first)
    _load_fast(f, second)


@opcode(*FROM_313)
def STORE_FAST_LOAD_FAST(f, i):
    store, load = i.argval
    _store_fast(f, store, f.pop())
    _load_fast(f, load)


@opcode(*FROM_313)
def STORE_FAST_STORE_FAST(f, i):
    first, second = i.argval
    _store_fast(f, first, f.pop())
    _store_fast(f, second, f.pop())


@opcode(PY314)
def LOAD_SMALL_INT(f, i):
    f.push(ConstantValue(i.arg))


@opcode(PY314)
def LOAD_CONST_IMMORTAL(f, i):
    LOAD_CONST(f, i)


@opcode(PY314)
def LOAD_CONST_MORTAL(f, i):
    LOAD_CONST(f, i)


def _push_call_pair(f: Frame, callable_value: Value) -> None:
    """A callable with the NULL of the call convention, in the version's order."""
    if cpython.NULL_AFTER_CALLABLE:
        f.push(callable_value)
        f.push(NULL)
    else:
        f.push(NULL)
        f.push(callable_value)


@opcode()
def DELETE_FAST(f, i):
    f.locals.pop(i.argval, None)


@opcode()
def LOAD_GLOBAL(f, i):
    value = f.load_global(i.argval)
    if i.arg & 1:
        _push_call_pair(f, value)
    else:
        f.push(value)


@opcode()
def STORE_GLOBAL(f, i):
    f.output.record_global_write(f.globals, i.argval, f.pop(), is_root=f.is_root_globals())


@opcode()
def MAKE_CELL(f, i):
    pass  # cells are made when the frame is created


@opcode()
def COPY_FREE_VARS(f, i):
    pass


@opcode()
def LOAD_CLOSURE(f, i):
    f.push(f.cells[i.argval])


@opcode()
def LOAD_DEREF(f, i):
    f.push(f.cells[i.argval].load(f))


@opcode()
def STORE_DEREF(f, i):
    f.cells[i.argval].store(f, f.pop())


# -- attributes -----------------------------------------------------------------------
def _load_method(f: Frame, name: str) -> None:
    obj = f.pop()
    _push_call_pair(f, f.getattr(obj, name))


@opcode(PY311)
def LOAD_METHOD(f, i):
    _load_method(f, i.argval)


@opcode()
def LOAD_ATTR(f, i):
    if cpython.LOAD_ATTR_LOADS_METHODS and i.arg & 1:
        _load_method(f, i.argval)
    else:
        f.push(f.getattr(f.pop(), i.argval))


@opcode(*FROM_312)
def LOAD_SUPER_ATTR(f, i):
    obj = f.pop()
    cls = f.pop()
    f.pop()  # the global `super`
    attr = SuperValue(cls.constant(), obj).getattr(f, i.argval)
    if i.arg & 1:
        _push_call_pair(f, attr)
    else:
        f.push(attr)


@opcode()
def STORE_ATTR(f, i):
    obj = f.pop()
    value = f.pop()
    f.store_attribute(obj, i.argval, value)


@opcode()
def DELETE_ATTR(f, i):
    f.delete_attribute(f.pop(), i.argval)


# -- operators ------------------------------------------------------------------------
_BINARY = [operator.add, operator.and_, operator.floordiv, operator.lshift, operator.matmul,
           operator.mul, operator.mod, operator.or_, operator.pow, operator.rshift, operator.sub,
           operator.truediv, operator.xor,
           operator.iadd, operator.iand, operator.ifloordiv, operator.ilshift, operator.imatmul,
           operator.imul, operator.imod, operator.ior, operator.ipow, operator.irshift, operator.isub,
           operator.itruediv, operator.ixor]


@opcode()
def BINARY_OP(f, i):
    b = f.pop()
    a = f.pop()
    if i.arg == cpython.NB_SUBSCR and cpython.SUBSCRIPT_IS_BINARY_OP:
        f.push(getitem(f, a, b))
    else:
        f.push(f.binary_op(_BINARY[i.arg], a, b))


_COMPARE = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
            ">": operator.gt, ">=": operator.ge}


@opcode()
def COMPARE_OP(f, i):
    b = f.pop()
    a = f.pop()
    f.push(f.binary_op(_COMPARE[i.argval], a, b))


@opcode()
def IS_OP(f, i):
    b = f.pop()
    a = f.pop()
    f.push(f.binary_op(operator.is_not if i.arg else operator.is_, a, b))


@opcode()
def CONTAINS_OP(f, i):
    container = f.pop()
    item = f.pop()
    result = f.binary_op(operator.contains, container, item)
    f.push(ConstantValue(not result.constant()) if i.arg else result)


def _unary(f: Frame, op, dunder: str) -> None:
    value = f.pop()
    if isinstance(value, (TensorValue, SymbolicIntValue)):
        f.push(record_call(f, op, [value], {}))
    elif value.is_constant():
        f.push(f.wrap_constant_object(op(value.constant())))
    else:
        f.push(f.call_dunder(value, dunder, []))


@opcode()
def UNARY_NEGATIVE(f, i):
    _unary(f, operator.neg, "__neg__")


@opcode(PY311)
def UNARY_POSITIVE(f, i):
    _unary(f, operator.pos, "__pos__")


@opcode()
def UNARY_INVERT(f, i):
    _unary(f, operator.invert, "__invert__")


@opcode()
def UNARY_NOT(f, i):
    f.push(ConstantValue(not f.pop().truth(f)))


@opcode(*FROM_312)
def CALL_INTRINSIC_1(f, i):
    name = i.argval if isinstance(i.argval, str) else ""
    if i.arg == 5 or name == "INTRINSIC_UNARY_POSITIVE":
        _unary(f, operator.pos, "__pos__")
    elif i.arg == 6 or name == "INTRINSIC_LIST_TO_TUPLE":
        f.push(TupleValue(f.pop().unpack(f)))
    elif i.arg == 3 or name == "INTRINSIC_STOPITERATION_ERROR":
        f.push(_stop_iteration_error(f.pop()))
    else:
        raise GraphBreak("unsupported-bytecode", f"CALL_INTRINSIC_1 {i.argval}")


def _stop_iteration_error(exception: Value) -> Value:
    """A generator's handler (3.12+): a StopIteration leaving its body becomes RuntimeError (PEP 479)."""
    if isinstance(exception, ObjectValue) and isinstance(exception.obj, (StopIteration, StopAsyncIteration)):
        error = RuntimeError(f"generator raised {type(exception.obj).__name__}")
        error.__cause__ = exception.obj
        return ObjectValue(error, None)
    return exception


@opcode(PY311)
def LIST_TO_TUPLE(f, i):
    f.push(TupleValue(f.pop().unpack(f)))


# -- subscripts ---------------------------------------------------------------------------
def getitem(f: Frame, obj: Value, index: Value) -> Value:
    if isinstance(obj, TensorValue):
        if isinstance(index, SymbolicIntValue) and index.python_type() is int:
            # Tensor.__getitem__ takes a SymInt index through __index__, which would specialize
            # it; select is the same view and keeps the index symbolic.
            return record_call(f, torch.select, [obj, ConstantValue(0), index], {})
        return record_call(f, operator.getitem, [obj, index], {})
    if isinstance(index, TensorValue):
        found = _tensor_keyed_item(f, obj, index)
        if found is not None:
            return found
        raise GraphBreak("data-dependent-op", "indexing a Python container with a tensor")
    if subscript_method(obj, "__getitem__") is not None:
        return f.call_dunder(obj, "__getitem__", [index])
    if isinstance(obj, (SequenceValue, DictValue, RecordValue)):
        return obj.getitem(f, index)
    if isinstance(obj, NNModuleValue) and isinstance(obj.obj, torch.nn.ModuleList) and isinstance(index, SliceValue):
        # A slice of a ModuleList is a new ModuleList; iterating or indexing it is all the
        # code can do with it, which a list of the same submodules answers alike.
        children = f.iterate(f.getattr(f.getattr(obj, "_modules"), "values").call(f, [], {})).unpack(f)
        return ListValue(children[index.constant()])
    if obj.is_constant() and isinstance(obj.constant(), type) and isinstance(index, ObjectValue) and \
            hasattr(obj.constant(), "__class_getitem__"):
        return f.wrap_constant_object(obj.constant()[index.obj])  # a generic alias (OrderedSet[T]): pure
    annotation = plain_object(index) if isinstance(obj, ObjectValue) and type(obj.obj).__module__ == "typing" \
        else NOT_PLAIN
    if annotation is not NOT_PLAIN:
        # a typing form subscripted (typing.List[T], Callable[[T], T] in an annotation): pure, and
        # typing is not traced
        return f.wrap_constant_object(obj.obj[annotation])
    if obj.is_constant() and index.is_constant():
        try:
            return f.wrap_constant_object(obj.constant()[index.constant()])
        except Exception as e:
            raise GraphBreak("op-error", f"{type(e).__name__}: {e}", exception=e)
    return f.call_dunder(obj, "__getitem__", [index])


def _tensor_keyed_item(f: Frame, obj: Value, key: TensorValue) -> Value | None:
    """`mapping[t]` for a dict from outside keyed by tensors (by identity, as Python hashes them),
    when `t` is an input too: read now, guarded through both sources. A missing key is left to
    eager Python (a defaultdict would make the item)."""
    mapping = obj.obj if isinstance(obj, ObjectValue) else None
    if not isinstance(mapping, dict) or obj.source is None or key.source is None:
        return None
    real = next((gi.example for gi in f.output.inputs if gi.node is key.node), None)
    if real is None or real not in mapping:
        return None
    return f.wrap(dict.__getitem__(mapping, real), TensorKeySource(obj.source, key.source))


@opcode()
def BINARY_SUBSCR(f, i):
    index = f.pop()
    obj = f.pop()
    f.push(getitem(f, obj, index))


@opcode(*FROM_312)
def BINARY_SLICE(f, i):
    stop, start, obj = f.pop(), f.pop(), f.pop()
    f.push(getitem(f, obj, SliceValue([start, stop])))


def setitem(f: Frame, obj: Value, index: Value, value: Value) -> None:
    if isinstance(obj, TensorValue):
        record_call(f, operator.setitem, [obj, index, value], {})
    elif subscript_method(obj, "__setitem__") is not None:
        f.call_dunder(obj, "__setitem__", [index, value])
    elif isinstance(obj, ListValue):  # list.__setitem__ (container_methods.py): CPython's errors too
        obj.getattr(f, "__setitem__").call(f, [index, value], {})
    elif isinstance(obj, DictValue):
        key = hash_key(index, False)  # an unhashable key raises TypeError for the program
        obj.mutate(f)
        obj.items[key] = value
    elif isinstance(obj, (ObjectValue, UserObjectValue)):
        f.call_dunder(obj, "__setitem__", [index, value])
    else:
        raise GraphBreak("unsupported-operation", f"item assignment on {obj!r}")


@opcode()
def STORE_SUBSCR(f, i):
    index = f.pop()
    obj = f.pop()
    value = f.pop()
    setitem(f, obj, index, value)


@opcode(*FROM_312)
def STORE_SLICE(f, i):
    stop, start, obj, value = f.pop(), f.pop(), f.pop(), f.pop()
    setitem(f, obj, SliceValue([start, stop]), value)


@opcode()
def DELETE_SUBSCR(f, i):
    index = f.pop()
    obj = f.pop()
    if subscript_method(obj, "__delitem__") is not None:
        f.call_dunder(obj, "__delitem__", [index])
    elif isinstance(obj, ListValue):
        obj.getattr(f, "__delitem__").call(f, [index], {})
    elif isinstance(obj, DictValue):
        obj.mutate(f)
        del obj.items[index.constant()]
    else:
        raise GraphBreak("unsupported-operation", f"del on {obj!r}")


# -- building containers ------------------------------------------------------------------
@opcode()
def BUILD_TUPLE(f, i):
    f.push(TupleValue(f.popn(i.arg)))


@opcode()
def BUILD_LIST(f, i):
    f.push(ListValue(f.popn(i.arg)))


@opcode()
def BUILD_SET(f, i):
    f.push(SetValue(f.popn(i.arg)))


@opcode()
def BUILD_MAP(f, i):
    items = f.popn(2 * i.arg)
    f.push(DictValue({items[k].constant(): items[k + 1] for k in range(0, len(items), 2)}))


@opcode()
def BUILD_CONST_KEY_MAP(f, i):
    keys = f.pop().constant()
    values = f.popn(i.arg)
    f.push(DictValue(dict(zip(keys, values))))


@opcode()
def BUILD_SLICE(f, i):
    f.push(SliceValue(f.popn(i.arg)))


@opcode()
def BUILD_STRING(f, i):
    parts = f.popn(i.arg)
    lazy = lazy_text(lambda *texts: "".join(texts), parts) if any(isinstance(p, LazyTextValue) for p in parts) else None
    f.push(lazy or ConstantValue("".join(p.constant() for p in parts)))


def _target(f: Frame, depth: int):
    """The container that a comprehension builds; one from outside (a resume function's input) records its mutation."""
    target = f.stack[-depth]
    if hasattr(target, "mutate"):
        target.mutate(f)
    return target


@opcode()
def LIST_APPEND(f, i):
    value = f.pop()
    _target(f, i.arg).items.append(value)


@opcode()
def SET_ADD(f, i):
    value = f.pop()
    _target(f, i.arg).items[value.constant()] = value


@opcode()
def MAP_ADD(f, i):
    value = f.pop()
    key = f.pop()
    _target(f, i.arg).items[key.constant()] = value


@opcode()
def LIST_EXTEND(f, i):
    items = f.iterate(f.pop()).unpack(f)
    _target(f, i.arg).items.extend(items)


@opcode()
def SET_UPDATE(f, i):
    items = f.iterate(f.pop()).unpack(f)
    target = f.stack[-i.arg]
    for v in items:
        target.items[v.constant()] = v


@opcode()
def DICT_UPDATE(f, i):
    other = f.pop()
    target = f.stack[-i.arg]
    if isinstance(other, DictValue):
        target.items.update(other.items)
        return
    # another mapping (`**mapping`, `{**mapping}`): Python reads its keys() and each item
    keys = f.iterate(f.call(f.getattr(other, "keys"), [], {})).unpack(f)
    for key in keys:
        if not key.is_constant():
            raise GraphBreak("unsupported-operation", f"dict update from {other!r} with a key known only at run time")
        target.items[key.constant()] = f.getitem(other, key)


HANDLERS["DICT_MERGE"] = DICT_UPDATE


@opcode()
def UNPACK_SEQUENCE(f, i):
    value = f.pop()
    if isinstance(value, SequenceValue):
        items = list(value.items)
    else:  # Python reads one item more than it needs, to see that there are no others
        iterator = f.iterate(value)
        items = []
        while len(items) <= i.arg and (item := iterator.next()) is not None:
            items.append(item)
    if len(items) != i.arg:
        error = ValueError(f"too many values to unpack (expected {i.arg})" if len(items) > i.arg else
                           f"not enough values to unpack (expected {i.arg}, got {len(items)})")
        raise GraphBreak("op-error", str(error), exception=error)
    for item in reversed(items):
        f.push(item)


@opcode()
def UNPACK_EX(f, i):
    items = f.iterate(f.pop()).unpack(f)
    before, after = i.arg & 0xFF, i.arg >> 8
    if len(items) < before + after:
        raise GraphBreak("op-error", "not enough values to unpack")
    middle = ListValue(items[before:len(items) - after])
    for item in reversed(items[len(items) - after:]):
        f.push(item)
    f.push(middle)
    for item in reversed(items[:before]):
        f.push(item)


_CONVERSIONS = {0: lambda raw: raw, 1: str, 2: repr, 3: ascii}


def _format_constant(value: Value, conversion: int, spec: str) -> Value:
    if isinstance(value, TensorValue):
        raise GraphBreak("data-dependent-op", "formatting a tensor into a string reads its values")
    convert = _CONVERSIONS[conversion]
    lazy = lazy_text(lambda v: format(convert(v), spec), [value])  # symbolic sizes: specialized when read
    return lazy or ConstantValue(format(convert(value.constant()), spec))


def _format(f: Frame, value: Value, conversion: int, spec: str) -> Value:
    """format(value, spec) after the conversion (!s, !r); an object whose class writes its text in
    Python (`object_text`) gives its str() or repr(), formatted then as a string."""
    if isinstance(value, UserObjectValue) and conversion in (0, 1, 2):
        plain = conversion or lookup_static(value.python_type(), "__format__")[0] is object.__format__
        text = object_text(f, value, repr if conversion == 2 else str) if plain else None
        if text is not None:
            return _format_constant(text, 0, spec)
    return _format_constant(value, conversion, spec)


@opcode(*UP_TO_312)
def FORMAT_VALUE(f, i):
    spec = f.pop().constant() if (i.arg & 0x04) else ""
    f.push(_format(f, f.pop(), i.arg & 0x03, spec))


@opcode(*FROM_313)
def CONVERT_VALUE(f, i):
    f.push(_format(f, f.pop(), i.arg, ""))


@opcode(*FROM_313)
def FORMAT_SIMPLE(f, i):
    f.push(_format(f, f.pop(), 0, ""))


@opcode(*FROM_313)
def FORMAT_WITH_SPEC(f, i):
    spec = f.pop().constant()
    f.push(_format_constant(f.pop(), 0, spec))


# -- iteration and jumps ---------------------------------------------------------------------
@opcode()
def GET_ITER(f, i):
    f.push(f.iterate(f.pop()))


@opcode()
def FOR_ITER(f, i):
    iterator = f.stack[-1]
    if not isinstance(iterator, IteratorValue):
        raise GraphBreak("iterate", f"iteration over {iterator!r}")
    value = iterator.next()
    if value is not None:
        f.push(value)
        return
    f.pop()
    f.ip = i.target + cpython.FOR_ITER_EXHAUSTED_SKIP  # past END_FOR (and 3.13's POP_TOP), as CPython does


@opcode()
def JUMP_FORWARD(f, i):
    f.jump(i)


@opcode()
def JUMP_BACKWARD(f, i):
    f.jump(i)


HANDLERS["JUMP_BACKWARD_NO_INTERRUPT"] = JUMP_BACKWARD


def _pop_jump(f: Frame, i: Instruction, when) -> None:
    value = f.stack[-1]
    if when(f, value):
        f.jump(i)
    f.pop()


def _is_none(f, v):
    if isinstance(v, ConstantValue):
        return v.value is None
    return False


for _name, _when in {
    "POP_JUMP_IF_TRUE": lambda f, v: v.truth(f),
    "POP_JUMP_IF_FALSE": lambda f, v: not v.truth(f),
    "POP_JUMP_IF_NONE": _is_none,
    "POP_JUMP_IF_NOT_NONE": lambda f, v: not _is_none(f, v),
}.items():
    for _variant in cpython.jump_variants(_name):
        HANDLERS[_variant] = (lambda when: lambda f, i: _pop_jump(f, i, when))(_when)


@opcode(PY311)
def JUMP_IF_TRUE_OR_POP(f, i):
    if f.stack[-1].truth(f):
        f.jump(i)
    else:
        f.pop()


@opcode(PY311)
def JUMP_IF_FALSE_OR_POP(f, i):
    if not f.stack[-1].truth(f):
        f.jump(i)
    else:
        f.pop()


# -- calls ------------------------------------------------------------------------------
@opcode(PY311)
def PRECALL(f, i):
    pass


@opcode(*UP_TO_312)
def KW_NAMES(f, i):
    f.kw_names = f.code.co_consts[i.arg]  # dis cannot resolve this argument on 3.11


@opcode()
def CALL(f, i):
    names, f.kw_names = f.kw_names, None
    _call(f, i.arg, names or ())


@opcode(*FROM_313)
def CALL_KW(f, i):
    _call(f, i.arg, f.pop().constant())


def _call(f: Frame, argc: int, names: tuple) -> None:
    """Pop a call's callable, NULL or self, and arguments (the last `names` by keyword)."""
    items = f.popn(argc + 2)
    first, second, args = items[0], items[1], items[2:]
    if cpython.NULL_AFTER_CALLABLE:  # [callable, self_or_null, args]
        fn = first
        if second is not NULL:
            args = [second, *args]
    elif first is NULL:  # [NULL, callable, args]
        fn = second
    else:  # [method, self, args]
        fn, args = first, [second, *args]
    kwargs = {}
    if names:
        kwargs = dict(zip(names, args[len(args) - len(names):]))
        args = args[:len(args) - len(names)]
    f.push(call_function(f, fn, args, kwargs))


def call_function(f: Frame, fn: Value, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if isinstance(fn, ObjectValue) and fn.obj is CALL_ADAPTER:
        return f.call(args[0], args[1:], kwargs)
    return f.call(fn, args, kwargs)


@opcode()
def CALL_FUNCTION_EX(f, i):
    kwargs = f.pop() if i.arg & 1 else DictValue({})
    args = f.pop()
    if cpython.NULL_AFTER_CALLABLE:  # [callable, unused, args, kwargs?]: 3.13 ignores the second slot
        f.pop()
        fn = f.pop()
    else:
        fn = f.pop()
        if f.stack and (f.stack[-1] is NULL or isinstance(f.stack[-1], ObjectValue) and f.stack[-1].obj is CALL_ADAPTER):
            f.pop()
    if not isinstance(kwargs, DictValue):
        raise GraphBreak("unsupported-call", "**kwargs from a non-dict")
    positional = f.iterate(args).unpack(f) if not isinstance(args, SequenceValue) else list(args.items)
    f.push(call_function(f, fn, positional, {str(k): v for k, v in kwargs.items.items()}))


@opcode(*UP_TO_312)
def MAKE_FUNCTION(f, i):
    code = f.pop().constant()
    flags = i.arg
    cells = f.pop().items if flags & 0x08 else []
    annotations = f.pop() if flags & 0x04 else None
    kwdefaults = {k: v for k, v in f.pop().items.items()} if flags & 0x02 else {}
    defaults = f.pop().items if flags & 0x01 else []
    function = NestedFunctionValue(code, f.globals, code.co_name, list(defaults), kwdefaults, list(cells),
                                   code.co_qualname)
    if annotations is not None:
        function.written["__annotations__"] = _annotations(annotations)
    f.push(function)


def _annotations(part: Value) -> Value:
    """MAKE_FUNCTION's annotations (a tuple of names and values, paired) as the function's dict."""
    if isinstance(part, DictValue):
        return part
    items = part.items
    return DictValue({items[k].constant(): items[k + 1] for k in range(0, len(items), 2)})


@opcode(*FROM_313)
def MAKE_FUNCTION(f, i):  # noqa: F811 (3.13: the parts arrive through SET_FUNCTION_ATTRIBUTE)
    code = f.pop().constant()
    f.push(NestedFunctionValue(code, f.globals, code.co_name, [], {}, [], code.co_qualname))


@opcode(*FROM_313)
def SET_FUNCTION_ATTRIBUTE(f, i):
    function = f.pop()
    part = f.pop()
    if i.arg == 0x08:
        function._cells = list(part.items)
    elif i.arg == 0x02:
        function._kwdefaults = dict(part.items.items())
    elif i.arg == 0x01:
        function._defaults = list(part.items)
    elif i.arg == 0x04:
        function.written["__annotations__"] = _annotations(part)
    # 0x10 (3.14's annotate function) does not change what a call does
    f.push(function)


@opcode(*FROM_313)
def TO_BOOL(f, i):
    """A no-op here: the jump or `not` after it asks for the truth (a break there converts, see
    `cpython.NEEDS_EXACT_BOOL`), and TO_BOOL on a tensor would end the graph one step early."""


@opcode()
def RETURN_VALUE(f, i):
    _return(f, f.pop())


def _return(f: Frame, value: Value) -> None:
    raise Return(value)


@opcode()
def RETURN_GENERATOR(f, i):
    if not f.is_generator:
        raise GraphBreak("generator", "a generator function at the top level")
    f.push(ConstantValue(None))


@opcode()
def YIELD_VALUE(f, i):
    """Suspend the generator's frame (see generators.py); send() replaces the placeholder."""
    value = f.pop()
    f.push(ConstantValue(None))
    raise Suspended(value)


@opcode()
def GET_YIELD_FROM_ITER(f, i):
    if not f.is_generator:
        raise GraphBreak("generator", "yield from in a generator at the top level")
    value = f.pop()
    f.push(value if isinstance(value, GeneratorValue) else f.iterate(value))


@opcode()
def SEND(f, i):
    """One step of `yield from`: send the value to the sub-iterator; its item goes on to the
    YIELD_VALUE that follows, and its end jumps past the loop with its return value."""
    sent = f.pop()
    receiver = f.stack[-1]
    if isinstance(receiver, GeneratorValue):
        item = receiver.send(sent)
    elif isinstance(receiver, IteratorValue):
        if not (sent.is_constant() and sent.constant() is None):
            error = AttributeError(f"'{receiver.python_type().__name__}' object has no attribute 'send'")
            raise GraphBreak("op-error", str(error), exception=error)
        item = receiver.next()
    else:
        raise GraphBreak("generator", "awaiting a coroutine")
    if item is not None:
        f.delegate = receiver
        f.push(item)
        return
    f.delegate = None
    if cpython.SEND_POPS_RECEIVER:
        f.pop()
    f.push(receiver.return_value if isinstance(receiver, GeneratorValue) else ConstantValue(None))
    f.jump(i)


@opcode(*FROM_312)
def END_SEND(f, i):
    value = f.pop()
    f.pop()
    f.push(value)


# -- with blocks, exceptions, imports -----------------------------------------------------------
@opcode()
def BEFORE_WITH(f, i):
    ctx = f.pop()
    exit_fn = f.getattr(ctx, "__exit__")
    enter = f.getattr(ctx, "__enter__")
    f.push(exit_fn)
    f.push(f.call(enter, [], {}))


@opcode()
def RAISE_VARARGS(f, i):
    if i.arg == 0:  # bare `raise`: the exception being handled, when capture raised it
        handled = f.capture.handled
        if handled_exception(f.capture) is None:
            raise GraphBreak("raise", "an exception is re-raised", "it is raised by Python, outside the graph")
        error = GraphBreak("raise", "an exception is re-raised", exception=handled.obj)
        error.root_step = getattr(handled, "root_step", None)
        raise error
    exception = _exception_of(f.stack[-i.arg])
    if i.arg == 2 and exception is not None and f.stack[-2].source is not None:
        exception = None  # an exception object from outside: its __cause__ is set by Python
    if i.arg == 2 and exception is not None:  # raise ... from cause
        cause = f.stack[-1]
        if cause.is_constant() and cause.constant() is None:
            exception.__cause__ = None  # sets __suppress_context__, as `from None` does
        else:
            exception.__cause__ = _exception_of(cause)
            if exception.__cause__ is None:
                exception = None  # a cause capture cannot make: Python raises it
    raise GraphBreak("raise", "an exception is raised", "it is raised by Python, outside the graph",
                     exception=exception)


def _exception_of(raised: Value) -> BaseException | None:
    """The exception `raise raised` raises: an instance made during capture, or a class called."""
    if isinstance(raised, ObjectValue) and isinstance(raised.obj, BaseException):
        return raised.obj
    if raised.is_constant() and isinstance(raised.constant(), type) and \
            issubclass(raised.constant(), BaseException):
        return raised.constant()()
    return None


@opcode()
def PUSH_EXC_INFO(f, i):
    exc = f.pop()
    f.push(f.capture.handled)  # what POP_EXCEPT restores
    f.capture.handled = exc
    f.push(exc)


@opcode()
def CHECK_EXC_MATCH(f, i):
    cls = f.pop().constant()
    f.push(ConstantValue(isinstance(f.stack[-1].obj, cls)))


@opcode()
def POP_EXCEPT(f, i):
    f.capture.handled = f.pop()


@opcode()
def RERAISE(f, i):
    exc = f.pop()
    error = GraphBreak("raise", "an exception is re-raised", exception=exc.obj)
    error.root_step = getattr(exc, "root_step", None)
    raise error


@opcode()
def WITH_EXCEPT_START(f, i):
    exit_fn, exc = f.stack[-4], f.stack[-1]
    f.push(f.call(exit_fn, [f.wrap_constant_object(type(exc.obj)), exc, ConstantValue(None)], {}))


@opcode()
def LOAD_ASSERTION_ERROR(f, i):
    raise GraphBreak("assert", "an assertion failed during capture")


@opcode()
def IMPORT_NAME(f, i):
    fromlist = f.pop().constant()
    level = f.pop().constant()
    module = __import__(i.argval, f.globals, None, fromlist, level)
    f.push(f.wrap_constant_object(module))


@opcode()
def IMPORT_FROM(f, i):
    f.push(f.getattr(f.stack[-1], i.argval))
