"""The symbolic interpreter of CPython 3.11, 3.12 and 3.13 bytecode.

A `Frame` executes one function's instructions over symbolic `Value`s: the
root frame is the compiled function itself, and every Python call it can see
through is executed by a child frame (inlining). Tensor operations are
recorded into the shared `OutputGraph`; everything else is evaluated at
capture time. Opcode handlers are methods registered in `opcodes.py`.

A handler that cannot proceed raises `GraphBreak`. The root frame notes the
step at which that happened (`BreakAt`); the frame converter then replays the
capture up to that step and ends the graph there.
"""

from __future__ import annotations

import dis
import operator
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable

import torch

from . import builder, cpython, polyfills
from .attributes import delete_attribute, store_attribute
from .autograd_function import applied_function, call_apply
from .breaks import GraphBreak, UserLocation
from .capture_state import Capture, Return, StopCapture, chain_context
from .calls import binary_op, bind_arguments, call_object, inline_function
from .module_call import call_module
from .output import SideEffect
from .regions import capture_region, is_compile_region, region_function
from .sources import AttrSource, BuiltinSource, ClosureSource, GlobalSource, LocalSource, ModuleGlobalSource
from .values.base import ConstantValue, NULL, NullValue, Value
from .values.lazy import LazyValue
from .values.builtins import BuiltinValue
from .values.cells import CellValue
from .values.containers import (DictValue, IteratorValue, ListValue, SequenceValue, SetValue, TupleValue,
                                live_iterator)
from .values.functions import FunctionValue, MethodValue, NestedFunctionValue
from .values.objects import GradModeValue, NNModuleValue, ObjectValue, SuperValue, UserObjectValue, lookup_static
from .values.records import RecordValue
from .values.tensors import TensorValue, record_call

MAX_STEPS = 200_000


@dataclass
class Instruction:
    opname: str
    opcode: int
    arg: int | None
    argval: Any
    offset: int
    lineno: int | None
    target: int | None  # index of the jump target instruction, if any


def instructions_of(code: types.CodeType) -> tuple[list[Instruction], dict[int, int]]:
    result: list[Instruction] = []
    lineno = code.co_firstlineno
    everything = list(dis.get_instructions(code))
    raw = [i for i in everything if i.opname not in cpython.NOT_INSTRUCTIONS]
    index_of = {i.offset: n for n, i in enumerate(raw)}
    # A jump may target the EXTENDED_ARG prefix of an instruction: map it to that instruction.
    for i in reversed(everything):
        if i.opname == "EXTENDED_ARG":
            following = next(j for j in everything if j.offset > i.offset and j.opname != "EXTENDED_ARG")
            index_of[i.offset] = index_of[following.offset]
    for i in raw:
        if i.positions is not None and i.positions.lineno is not None:
            lineno = i.positions.lineno
        target = None
        if i.opcode in cpython.JUMP_OPCODES:
            target = index_of.get(i.argval)
        result.append(Instruction(i.opname, i.opcode, i.arg, i.argval, i.offset, lineno, target))
    return result, index_of


_INSTRUCTION_CACHE: dict[types.CodeType, tuple] = {}


def cached_instructions(code: types.CodeType):
    entry = _INSTRUCTION_CACHE.get(code)
    if entry is None:
        entry = _INSTRUCTION_CACHE[code] = instructions_of(code)
    return entry


def _opcodes():
    """opcodes.py, the handler table the frame loop runs (a layer below: it imports no interpreter)."""
    # deferred: opcodes.py costs ~6 ms at import; a process running only warm-started entries never captures
    from . import opcodes
    return opcodes


class Frame:
    def __init__(self, capture: Capture, code: types.CodeType, globals_: dict, parent: "Frame | None",
                 locals_: dict[str, Value], cells: dict[str, Any]) -> None:
        self.capture = capture
        capture.frames.append(self)
        self.output = capture.output
        self.config = capture.config
        self.code = code
        self.output.code_files.add(code.co_filename)
        self.globals = globals_
        self.builtins = globals_.get("__builtins__", __builtins__)
        if isinstance(self.builtins, types.ModuleType):
            self.builtins = self.builtins.__dict__
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1
        self.instructions, self.index_of = cached_instructions(code)
        self.locals = locals_
        self.cells = cells
        self.stack: list[Value] = []
        self.ip = 0
        self.current: Instruction | None = None
        self.kw_names: tuple | None = None
        self.is_generator = False  # a generator's frame: YIELD_VALUE suspends it (see generators.py)
        self.delegate: Value | None = None  # the iterator a suspended `yield from` reads
        self.current_builtin = None
        self.current_method = None  # the container method being called (handlers shared by several names)
        self.is_root = parent is None

    # -- locations -------------------------------------------------------------
    def location(self) -> UserLocation:
        lineno = self.current.lineno if self.current else self.code.co_firstlineno
        return UserLocation(self.code.co_filename, lineno or 0, self.code.co_name)

    def user_stack(self) -> list[UserLocation]:
        frames, f = [], self
        while f is not None:
            frames.append(f.location())
            f = f.parent
        return list(reversed(frames))

    # -- running ------------------------------------------------------------------
    def run(self) -> Value:
        handlers = _opcodes().HANDLERS
        capture = self.capture
        while True:
            inst = self.instructions[self.ip]
            if self.is_root:
                if capture.break_at is not None and capture.steps == capture.break_at:
                    self.current = inst
                    raise StopCapture()
                capture.steps += 1
                if capture.steps > MAX_STEPS:
                    raise GraphBreak("too-long", f"more than {MAX_STEPS} bytecode steps in one graph")
            self.current = inst
            self.ip += 1
            handler = handlers.get(inst.opname)
            if handler is None:
                raise GraphBreak("unsupported-bytecode", f"opcode {inst.opname} is not supported")
            try:
                handler(self, inst)
            except Return as r:
                return r.value
            except GraphBreak as e:
                if not e.reason.user_stack:
                    e.reason.user_stack = self.user_stack()
                if e.root_step is None:
                    e.root_step = capture.steps - 1
                if e.exception is None or not self.enter_handler(inst, e):
                    raise

    def local(self, name: str) -> Value | None:
        """The value of local `name`, wrapping a lazily bound argument on first use."""
        value = self.locals.get(name)
        if type(value) is LazyValue:
            value = self.locals[name] = value.realize(self)
        return value

    def enter_handler(self, inst: Instruction, error: GraphBreak) -> bool:
        """Follow the exception table to the handler of `error`'s exception, as CPython would."""
        for entry in cpython.exception_table(self.code):
            if entry.start <= inst.offset < entry.end:
                del self.stack[entry.depth:]
                if entry.lasti:
                    self.push(ConstantValue(inst.offset))
                chain_context(self.capture, error.exception)
                value = ObjectValue(error.exception, None)
                value.root_step = error.root_step  # a re-raise still breaks where it began
                self.push(value)
                self.ip = self.index_of[entry.target]
                return True
        return False

    def push(self, value: Value) -> None:
        self.stack.append(value)

    def pop(self) -> Value:
        return self.stack.pop()

    def popn(self, n: int) -> list[Value]:
        if n == 0:
            return []
        items = self.stack[-n:]
        del self.stack[-n:]
        return items

    def jump(self, inst: Instruction) -> None:
        self.ip = inst.target

    # -- values from outside --------------------------------------------------------
    def wrap(self, obj: Any, source) -> Value:
        return builder.wrap(self, obj, source)

    def wrap_constant_object(self, obj: Any) -> Value:
        return builder.wrap_constant_object(self, obj)

    def constant_tensor(self, tensor: torch.Tensor) -> Value:
        return self.output.constant_tensor(tensor)

    def load_global(self, name: str) -> Value:
        if (id(self.globals), name) in self.output.attribute_overlay:
            return self.output.attribute_overlay[(id(self.globals), name)]
        if name in self.globals:
            source = GlobalSource(name) if self.globals is self.capture.root_globals else None
            if source is None:
                return self.wrap_foreign_global(name)
            return self.wrap(self.globals[name], source)
        if name in self.builtins:
            return self.wrap(self.builtins[name], BuiltinSource(name)) if self.is_root_globals() \
                else self.wrap_constant_object(self.builtins[name])
        raise GraphBreak("name-error", f"name {name!r} is not defined")

    def is_root_globals(self) -> bool:
        return self.globals is self.capture.root_globals

    def wrap_foreign_global(self, name: str) -> Value:
        """A global of an inlined function from another module, read through that module."""
        module_name = self.globals.get("__name__", "")
        module = sys.modules.get(module_name)
        value = self.globals[name]
        if (module_name.startswith("torch.") or module_name == "torch") and \
                not isinstance(value, (dict, list, set)):
            return self.wrap_constant_object(value)  # torch's functions and classes do not change
        if module is not None and getattr(module, "__dict__", None) is self.globals:
            return self.wrap(self.globals[name], ModuleGlobalSource(module_name, name))
        return self.wrap_constant_object(self.globals[name])

    # -- generic operations -----------------------------------------------------------
    def getattr(self, obj: Value, name: str) -> Value:
        return obj.getattr(self, name)

    def call(self, fn: Value, args: list[Value], kwargs: dict[str, Value]) -> Value:
        entry = polyfills.find(fn, args, kwargs)
        if entry is not None:  # a C function with a Python stand-in: trace that instead of breaking
            return polyfills.call(self, entry, fn, args, kwargs)
        function_class = applied_function(fn)
        if function_class is not None:  # a custom autograd.Function: one node, its backward traced later
            return call_apply(self, function_class, args, kwargs)
        return fn.call(self, args, kwargs)

    def call_module(self, module: NNModuleValue, args: list[Value], kwargs: dict[str, Value]) -> Value:
        """Call an nn.Module: hooks and forward (module_call.py)."""
        return call_module(self, module, args, kwargs)

    def call_object(self, value: ObjectValue, args, kwargs) -> Value:
        return call_object(self, value, args, kwargs)

    def call_dunder(self, obj: Value, name: str, args: list[Value]) -> Value:
        method = lookup_static(obj.python_type(), name)[0]
        if isinstance(method, types.FunctionType):
            return self.call(FunctionValue(method), [obj, *args], {})
        raise GraphBreak("unsupported-operation", f"{obj.python_type().__name__}.{name} is not a Python method")

    def getitem(self, obj: Value, index: Value) -> Value:
        """`obj[index]`, as BINARY_SUBSCR does it."""
        return _opcodes().getitem(self, obj, index)

    def binary_op(self, op: Callable, a: Value, b: Value) -> Value:
        return binary_op(self, op, a, b)

    def iterate(self, obj: Value) -> IteratorValue:
        if isinstance(obj, IteratorValue):
            return obj
        if isinstance(obj, ConstantValue) and isinstance(obj.value, (range, str, tuple, frozenset, bytes)):
            return IteratorValue([ConstantValue(v) for v in obj.value])
        if isinstance(obj, (NNModuleValue, ObjectValue, UserObjectValue)) and \
                lookup_static(obj.python_type(), "__iter__")[0] is not None:
            return self.iterate(self.call_dunder(obj, "__iter__", []))
        return live_iterator(obj) or IteratorValue(obj.unpack(self))

    def store_attribute(self, obj: Value, name: str, value: Value, custom: bool = True) -> Value:
        """`obj.name = value`; custom=False is `object.__setattr__` (no class __setattr__)."""
        store_attribute(self, obj, name, value, custom)
        return ConstantValue(None)

    def delete_attribute(self, obj: Value, name: str, custom: bool = True) -> Value:
        """`del obj.name`; custom=False is `object.__delattr__` (no class __delattr__)."""
        delete_attribute(self, obj, name, custom)
        return ConstantValue(None)

    def set_grad_enabled(self, enabled: bool) -> Value:
        if torch.is_grad_enabled() != enabled:
            self.output.create_node("call_function", torch._C._set_grad_enabled, (enabled,), {}, None)
            torch._C._set_grad_enabled(enabled)
        return ConstantValue(None)

    def zero_argument_super(self) -> Value:
        code = self.code
        if "__class__" not in code.co_freevars or code.co_argcount == 0:
            raise GraphBreak("super", "super() without arguments outside a method")
        cls = self.cells["__class__"].load(self).constant()
        first = code.co_varnames[0]
        obj = self.local(first)
        if obj is None and first in self.cells:
            obj = self.cells[first].load(self)
        return SuperValue(cls, obj)

    def read_attribute_of_source(self, source, name: str):
        """An attribute (such as `.grad`) of the real tensor behind a graph input."""
        for graph_input in self.output.inputs:
            if graph_input.source == source:
                return getattr(graph_input.example, name)
        raise GraphBreak("tensor-attribute", f".{name} of {source}")

    # -- inlining ------------------------------------------------------------------------
    def child_frame(self, fn: Value, args: list[Value], kwargs: dict[str, Value]) -> "Frame":
        """The frame of a call of function value `fn` from this one (inlined, or a generator's, run
        lazily): the arguments bound as CPython binds them, the cells made."""
        code = fn.code
        bound = bind_arguments(code, fn.defaults(self), fn.kwdefaults(self), args, kwargs)
        cells: dict[str, Any] = {name: CellValue(bound.pop(name, None)) for name in code.co_cellvars}
        for name, cell in zip(code.co_freevars, fn.closure_cells(self)):
            cells[name] = cell
        return Frame(self.capture, code, fn.globals, self, bound, cells)

    def inline_function(self, fn: Value, args: list[Value], kwargs: dict[str, Value]) -> Value:
        if is_compile_region(fn):  # nested_compile_region: inlined, then outlined into a shared subgraph
            marked = region_function(fn)
            return capture_region(self, lambda: inline_function(self, marked, args, kwargs))
        return inline_function(self, fn, args, kwargs)

