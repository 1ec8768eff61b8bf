"""Generated Python that runs a compiled graph and rebuilds the frame's values.

`RuntimeCodegen` writes the body of one function, `restore(L)`: it reads the
graph inputs through their sources, calls the compiled graph, replays the
Python side effects recorded during capture, and returns the rebuilt values
(the function's result, or the stack and locals at a graph break). The text is
compiled once per cache entry; the hot path is plain straight-line Python.
"""

from __future__ import annotations

import builtins
import copy
import sys
import types
import weakref
from typing import Any

import torch

from ..runtime.persist import CompiledText
from .breaks import GraphBreak
from .output import OutputGraph
from .sources import render
from .values.base import ConstantValue, Value
from .values.container_subclasses import new_container
from .values.containers import DictValue, ListValue, SetValue
from .values.tensors import TensorValue


class GradExit:
    """The __exit__ of a grad-mode block entered by generated code at a graph break."""

    __slots__ = ("previous",)

    def __init__(self, previous: bool) -> None:
        self.previous = previous

    def __call__(self, *exc_info) -> bool:
        torch._C._set_grad_enabled(self.previous)
        return False


class NullExit:
    """The __exit__ of a context with no effect (a profiler range, nullcontext) entered before a
    graph break: capture reads a call of it as nothing (contextlib's own __exit__ is not traced)."""

    __slots__ = ()

    def __call__(self, *exc_info) -> bool:
        return False


NULL_EXIT = NullExit()


def enter_grad_mode(enabled: bool, previous: bool) -> GradExit:
    torch._C._set_grad_enabled(enabled)
    return GradExit(previous)


def make_function(code, globals_, name, defaults, kwdefaults, cells, attributes=None):
    fn = types.FunctionType(code, globals_, name, defaults or None, cells or None)
    if kwdefaults:
        fn.__kwdefaults__ = kwdefaults
    for attribute, value in (attributes or {}).items():  # written in the function (functools.wraps)
        setattr(fn, attribute, value)
    return fn


def new_object(cls, attributes):
    obj = object.__new__(cls)
    for name, value in attributes.items():
        if isinstance(getattr(cls, name, None), types.MemberDescriptorType):  # a __slots__ entry
            object.__setattr__(obj, name, value)
        else:
            obj.__dict__[name] = value
    return obj


def advanced_iterator(iterable, position: int):
    """iter(iterable) after `position` items were taken: a list iterator rebuilt over the same list."""
    iterator = iter(iterable)
    for _ in range(position):
        next(iterator)
    return iterator


def advance_iterator(iterator, count: int) -> None:
    """Take `count` items from `iterator`, as capture did from its reading of it."""
    for _ in range(count):
        next(iterator)


def replace_contents(container, new):
    if isinstance(container, list):
        container[:] = new
    else:
        container.clear()
        container.update(new)


def registered_hook(tensor, hook, removed: bool):
    """`tensor.register_hook(hook)` replayed after the graph; removed again where the function removed it."""
    handle = tensor.register_hook(hook)
    if removed:
        handle.remove()
    return handle


def exhausted_generator():
    """A finished generator, standing for one that finished during capture."""
    generator = (item for item in ())
    next(generator, None)
    return generator


HELPERS = {
    "exhausted_generator": exhausted_generator,
    "make_function": make_function, "new_object": new_object, "MethodType": types.MethodType,
    "CellType": types.CellType, "enter_grad_mode": enter_grad_mode, "replace_contents": replace_contents,
    "advanced_iterator": advanced_iterator, "new_container": new_container,
    "advance_iterator": advance_iterator, "registered_hook": registered_hook,
    "fresh_module": copy.deepcopy,  # a module made in the function (values/objects.MadeModuleValue)
}



def _plain_setter(target: Value) -> str:
    """What replays a recorded write: capture recorded the plain write a class's Python __setattr__
    ended in (it was inlined), so that __setattr__ must not run again; nn.Module's sorts values into
    its tables, as the write capture recorded meant."""
    try:
        cls = target.python_type()
    except GraphBreak:
        return "setattr"
    for klass in cls.__mro__:
        if "__setattr__" in klass.__dict__:
            setter = klass.__dict__["__setattr__"]
            custom = isinstance(setter, types.FunctionType) and setter is not torch.nn.Module.__setattr__
            return "object.__setattr__" if custom else "setattr"
    return "setattr"


class RuntimeCodegen:
    def __init__(self, output: OutputGraph) -> None:
        self.output = output
        self.env: dict[str, Any] = {}
        self.graph_outputs: list[TensorValue] = []
        self._output_index: dict[Any, int] = {}
        self._constant_names: dict[int, str] = {}
        self._built: dict[int, str] = {}  # id of a value made during capture -> the name it was built under
        self._keep: list[Value] = []  # those values, alive while their ids are keys

    # -- what values call while reconstructing ----------------------------------------
    def source(self, source) -> str:
        return render(source, self.constant)

    def constant(self, value: Any) -> str:
        if value is None or isinstance(value, (bool, int, str)) and type(value) in (bool, int, str):
            return repr(value)
        if isinstance(value, float) and value == value and value not in (float("inf"), float("-inf")):
            return repr(value)
        key = id(value)
        name = self._constant_names.get(key)
        if name is None:
            name = f"K{len(self._constant_names)}"
            self._constant_names[key] = name
            self.env[name] = value
        return name

    def null_exit(self) -> str:
        """The __exit__ of a context with no effect (`NULL_EXIT`), for values, which cannot import this module."""
        return self.constant(NULL_EXIT)

    def helper(self, name: str) -> str:
        self.env[f"_{name}"] = HELPERS[name]
        return f"_{name}"

    def tensor(self, value: TensorValue) -> str:
        node = value.node
        if value.source is not None:  # a graph input, or an input mutated in place: keep its identity
            return self.source(value.source)
        index = self._output_index.get(node)
        if index is None:
            index = self._output_index[node] = len(self.graph_outputs)
            self.graph_outputs.append(value)
        return f"__outs[{index}]"

    def value(self, value: Value) -> str:
        """An expression for `value`. A value made during capture (a list, a dict, an object, an
        iterator) is built once, where it is first mentioned, and named: every other slot that
        holds it then holds the same object, as two references to one list did in Python."""
        if isinstance(value, TensorValue):
            return value.reconstruct(self)  # a tensor, or a NumPy array (the tensor seen by NumPy)
        if value.source is not None or isinstance(value, ConstantValue):
            return value.reconstruct(self)
        return self._built_once(value, value.reconstruct)

    def cell(self, cell) -> str:
        """An expression for a closure cell (a CellValue or RealCellValue), made once per cell:
        two closures over one variable, and the frame that resumes after a break, share it."""
        return self._built_once(cell, cell.reconstruct_cell)

    def _built_once(self, obj, build) -> str:
        """`build(self)` the first time `obj` is mentioned, named; its name every later time."""
        name = self._built.get(id(obj))
        if name is not None:
            return name
        text = build(self)
        name = self._built[id(obj)] = f"__v{len(self._built)}"
        self._keep.append(obj)
        return f"({name} := {text})"

    # -- the function ------------------------------------------------------------------------
    def side_effect_lines(self) -> tuple[list[str], list[str]]:
        """Lines that read every written value (run first, while sources still see the old
        state), and lines that then perform the writes, in the order capture saw them."""
        reads, writes = [], []
        for n, effect in enumerate(self.output.side_effects):
            if effect.kind == "container":
                container = effect.target
                if isinstance(container, ListValue):
                    new = "[" + ", ".join(self.value(v) for v in container.items) + "]"
                elif isinstance(container, SetValue):
                    new = "{" + ", ".join(self.value(v) for v in container.items.values()) + "}" \
                        if container.items else "set()"
                else:
                    new = "{" + ", ".join(f"{self.constant(k)}: {self.value(v)}"
                                          for k, v in container.items.items()) + "}"
                reads.append(f"__w{n} = {new}")
                writes.append(f"{self.helper('replace_contents')}({self.source(container.source)}, __w{n})")
                continue
            if effect.kind == "advance":  # after the results are read: they may name items ahead of it
                iterator = effect.target
                writes.append(f"{self.helper('advance_iterator')}({self.source(iterator.source)}, {iterator.position})")
                continue
            if effect.kind == "hook":  # among the reads: a handle returned or stored must exist first
                reads.append(self.value(effect.target))
                continue
            if effect.kind == "delattr":
                reads.append(f"__t{n} = {self.value(effect.target)}")
                writes.append(f"delattr(__t{n}, {effect.key!r})")
                continue
            reads.append(f"__w{n} = {self.value(effect.value)}")
            if effect.kind == "attr":
                reads.append(f"__t{n} = {self.value(effect.target)}")
                writes.append(f"{_plain_setter(effect.target)}(__t{n}, {effect.key!r}, __w{n})")
            elif effect.kind == "cell":
                writes.append(f"{self.source(effect.target)} = __w{n}")
            elif effect.kind == "global":
                writes.append(f"G[{effect.key!r}] = __w{n}")
        return reads, writes


class RestoreFunction:
    """Generates `restore(L)` in two steps: the text first (which fixes the graph's
    outputs), then, once the backend has compiled the graph, the function itself."""

    def __init__(self, output: OutputGraph, result_values: list[Value], grad_mode_after: bool | None,
                 single: bool, call_graph: bool, wrap_indices: frozenset | set = frozenset(),
                 wrap_callee=None) -> None:
        self.output = output
        cg = self.codegen = RuntimeCodegen(output)
        reads, writes = cg.side_effect_lines()
        results = [cg.value(v) for v in result_values]
        if wrap_indices:
            cg.env["_wrap_callee"] = wrap_callee
        results = [f"_wrap_callee({r})" if i in wrap_indices else r for i, r in enumerate(results)]
        self.graph_outputs = cg.graph_outputs
        inputs = ", ".join(cg.source(gi.source) for gi in output.inputs)
        # __inputs: the graph's inputs, already read by a caller that walked their sources (the
        # fast path reads them while checking guards); None reads them here.
        lines = ["def restore(L, __inputs=None):"]
        if call_graph:
            cg.env["_input_sources"] = tuple(gi.source for gi in output.inputs)
            lines.append(f"    __outs = __graph({inputs}) if __inputs is None else __graph(*__inputs)")
        if grad_mode_after is not None:
            lines.append(f"    _set_grad({grad_mode_after!r})")
        lines += [f"    {line}" for line in reads]
        lines.append(f"    __result = {results[0]}" if single else
                     f"    __result = ({''.join(r + ', ' for r in results)})")
        lines += [f"    {line}" for line in writes]
        lines.append("    return __result")
        self.text = "\n".join(lines) + "\n"

    def finish(self, compiled_graph, fn_globals: dict, closure):
        restore = build_restore(self.text, self.codegen.env, compiled_graph, self.output.fn_name, fn_globals, closure)
        self.code = restore.code
        return restore

    def recipe(self, compiled_graph) -> tuple:
        """What `build_restore` needs besides the function's globals and closure (the warm-start cache saves it)."""
        return self.code, dict(self.codegen.env), compiled_graph, self.output.fn_name


def build_restore(text: "str | CompiledText", constants: dict, compiled_graph, fn_name: str, fn_globals: dict,
                  closure):
    """The `restore(L)` function from its text (or text and code) and the constants it names."""
    code = text if isinstance(text, CompiledText) else CompiledText(text, f"<tensorjit restore of {fn_name}>")
    env = dict(constants)
    env.update(G=fn_globals, B=builtins.__dict__, C=closure or (), S=sys.modules,
               __graph=compiled_graph, _set_grad=torch._C._set_grad_enabled)
    namespace: dict[str, Any] = {}
    exec(code.code(), env, namespace)
    restore = namespace["restore"]
    restore.code = code
    restore.input_sources = constants.get("_input_sources")  # what `__inputs` holds, in order
    return restore
