"""Capturing one call of a function into a cache entry.

`capture_entry` runs the symbolic interpreter over the function with the
call's real arguments. If the whole function is captured, the entry runs the
compiled graph and rebuilds the return value. If capture meets a graph break,
it is replayed up to the step where the break happened, and the entry becomes
transformed bytecode that runs the graph, executes the breaking instruction in
Python and continues in a resume function (see `resume.py`).
"""

from __future__ import annotations

import inspect
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .. import logs
from . import cpython
from ..backends.registry import BackendCompilerFailed, call_backend
from ..config import Config
from . import markers, native_guards
from .aliasing import check_aliasing
from .breaks import BreakReason, CaptureError, CompilerUsageError, GraphBreak, GraphBreakError
from .capture_state import Capture, StopCapture
from .codegen import RestoreFunction, build_restore
from .generators import unclosed_protected
from .guard_filter import filter_guards
from .guards import GUARDED_INPUTS, CompiledGuards, global_state_guards, load_guards, saved_guards
from .interpreter import Frame
from .output import OutputGraph
from .resume import Successor, TailCall, first_argument, hidden_parameters, resume_code, transformed_code
from .dynamic import DynamicPolicy, may_vary, shape_guards, symbolic_shapes
from .guards import Guard
from .sources import LocalSource
from .values.base import NULL, NullValue, Value
from .values.lazy import LazyValue
from .values.cells import CellValue, RealCellValue


@dataclass
class CompiledGraph:
    """One graph handed to a backend, kept for explain() and statistics."""

    graph_module: torch.fx.GraphModule
    input_shapes: list
    compiled: Callable
    op_count: int
    compile_seconds: float


@dataclass
class CacheEntry:
    guards: CompiledGuards
    run: Callable  # (args, kwargs, L) -> result or TailCall
    graphs: list[CompiledGraph] = field(default_factory=list)
    break_reason: BreakReason | None = None
    capture_seconds: float = 0.0
    """Wall time of capturing this entry, the backends' compile time excluded."""
    recipe: dict | None = None
    """What the warm-start cache saves to rebuild this entry in another process (runtime/warm_start.py):
    kind ("return", "break", "eager"), the restore function's text, constants and compiled graph,
    a break's transformed code and resume functions, and the source files capture read."""


class _BreakAt(Exception):
    def __init__(self, step: int, reason: BreakReason, is_error: bool = False) -> None:
        self.step = step
        self.reason = reason
        self.is_error = is_error


def capture_entry(owner, L: tuple) -> CacheEntry:
    """Capture `owner.fn` called with bound arguments `L` (owner: a CompiledFunction)."""
    try:
        return _attempt(owner, L, None)
    except _BreakAt as stop:
        if owner.fullgraph or stop.is_error:
            raise GraphBreakError(stop.reason, "fullgraph=True" if owner.fullgraph else
                                  "error_on_graph_break(True)") from None
        logs.graph_break(stop.reason)
        step = stop.step
        while True:
            try:
                entry = _attempt(owner, L, step)
            except _BreakAt as earlier:  # the state at `step` cannot be rebuilt, at an earlier step it can
                step = earlier.step
                continue
            entry.break_reason = stop.reason
            return entry


def _root_frame(owner, L: tuple, capture: Capture) -> Frame:
    fn = owner.fn
    code = fn.__code__
    names = code.co_varnames[:len(L)]
    local_values: dict[str, Value] = {n: LazyValue(v, LocalSource(i, n)) for i, (n, v) in enumerate(zip(names, L))}
    cells: dict[str, Any] = {}
    passed_cells = getattr(owner, "cell_arguments", frozenset())
    for name in code.co_cellvars:
        local = local_values.pop(name, None)
        if name in passed_cells:  # a resume function receives the cell itself, shared with closures
            cells[name] = RealCellValue(local.obj, None, 0, name, cell_source=local.source)
        else:
            cells[name] = CellValue(local)
    for i, (name, cell) in enumerate(zip(code.co_freevars, fn.__closure__ or ())):
        cells[name] = RealCellValue(cell, "root", i, name)
    return Frame(capture, code, fn.__globals__, None, local_values, cells)


def _attempt(owner, L: tuple, break_at: int | None) -> CacheEntry:
    fn = owner.fn
    output = OutputGraph(fn.__code__.co_name, DynamicPolicy(owner.dynamic, owner.dynamic_dims, owner.dynamic_ints,
                                                                resume=owner.origin is not None), L)
    for guard in global_state_guards():
        output.guard(guard)
    capture = Capture(owner.config, output, break_at)
    capture.root_globals = fn.__globals__
    grad_before = torch.is_grad_enabled()
    strict_before = markers.error_on_graph_break  # a block entered symbolically may not reach its exit
    frame = None
    try:
        frame = _root_frame(owner, L, capture)
        result = frame.run()
        if _unclosed_generator(owner, capture, frame):
            return eager_entry(fn, _build_guards(owner, output), output)
        return _finish_return(owner, output, result, grad_before, frame.location())
    except StopCapture:
        if _unclosed_generator(owner, capture, frame):
            return eager_entry(fn, _build_guards(owner, output), output)
        try:
            return _finish_break(owner, output, frame, grad_before)
        except GraphBreak as e:
            if e.root_step is not None and e.root_step < break_at:  # a generator before it started
                raise _BreakAt(e.root_step, e.reason) from None
            # the state at the break cannot be rebuilt: run this call pattern eagerly
            logs.emit("graph_breaks", f"{frame.location()}: cannot resume after the break ({e}); running eagerly")
            return eager_entry(fn, _build_guards(owner, output), output)
    except GraphBreak as e:
        reason = e.reason
        if not reason.user_stack and frame is not None:
            reason.user_stack = frame.user_stack()
        if break_at is not None:
            raise CaptureError(frame.location() if frame else None, e) from e
        if e.breaking_generator is not None and not owner.fullgraph and not _break_is_error(e, fn.__code__):
            logs.graph_break(reason)
            logs.emit("graph_breaks", f"{frame.location()}: the body of a generator it made breaks at "
                                      f"{e.breaking_generator}; running eagerly")
            entry = eager_entry(fn, _build_guards(owner, output), output)
            entry.break_reason = reason  # explain() and report() show why it runs eagerly
            return entry
        raise _BreakAt(e.root_step if e.root_step is not None else capture.steps - 1, reason,
                       _break_is_error(e, fn.__code__)) from None
    except (GraphBreakError, CaptureError, CompilerUsageError, BackendCompilerFailed, _BreakAt,
            _constraint_violation()):  # a broken mark_dynamic promise is the user's error, as in torch
        raise
    except Exception as e:
        location = _deepest_location(e, frame)
        raise CaptureError(location, e) from e
    finally:
        for context in reversed(capture.open_contexts):  # a capture that ended inside the block
            context.exit_real()
        torch._C._set_grad_enabled(grad_before)
        markers.error_on_graph_break = strict_before
        capture.release()


def _unclosed_generator(owner, capture: Capture, frame: Frame) -> bool:
    """Is a generator left suspended inside a try/with block? Python runs that block's cleanup
    when the generator is dropped, at a point capture cannot place: this call runs eagerly."""
    generator = unclosed_protected(capture)
    if generator is None:
        return False
    explanation = f"{generator.frame.code.co_name}() is left suspended inside a try or with block, " \
                  "whose cleanup Python runs when the generator is dropped"
    if owner.fullgraph:
        raise GraphBreakError(BreakReason("generator", explanation, "read the generator to its end or close() it",
                                          [generator.frame.location()]))
    logs.emit("graph_breaks", f"{frame.location()}: {explanation}; running eagerly")
    return True


def _constraint_violation() -> type:
    """torch's ConstraintViolationError, from symbolic_shapes imported when first needed (dynamic.py)."""
    return symbolic_shapes().ConstraintViolationError


def _break_is_error(e: GraphBreak, code) -> bool:
    """error_on_graph_break: the innermost marked frame decides, then the flag of the context manager."""
    for decision in (e.is_error, markers.break_is_error(code)):
        if decision is not None:
            return decision
    return markers.error_on_graph_break


def _deepest_location(e: BaseException, frame):
    located = getattr(e, "tensorjit_location", None)
    if located is not None:
        return located
    return frame.location() if frame is not None else None


def _build_guards(owner, output: OutputGraph) -> CompiledGuards:
    fn = owner.fn
    if output.shape_env is not None:
        for expression in shape_guards(output.shape_env, *output.symbolic_inputs()):
            output.guard(Guard(None, "expression", expression))
    owner.last_shapes = {gi.source.expression(): tuple(gi.example.shape) for gi in output.inputs
                         if isinstance(gi.example, torch.Tensor)}
    owner.last_ints = {source.expression(): obj for source, (obj, _) in output.wrapped.items()
                       if type(obj) in (int, float) and may_vary(source, _owner(output, source), owner.origin is not None)}
    guard_set = output.guards
    if owner.config.guard_filter_fn is not None:
        guard_set = filter_guards(guard_set, output.wrapped, owner.config.guard_filter_fn)
    guards = guard_set.build(fn.__globals__, fn.__closure__, in_instance_dict=_instance_attributes(output, guard_set),
                             captured=lambda source: output.wrapped.get(source, (None,))[0],
                             native=native_guards.for_config(owner.config))
    native_guards.settle_when_built(owner.config, owner, guards)  # where it is still being built
    # now: no Guard outlives capture
    guards.saved = saved_guards(guard_set.guards, fn.__globals__, fn.__closure__, with_check=not guards.native)
    if isinstance(guards.saved, BaseException):  # the reason it cannot be saved, kept without its traceback
        guards.saved = type(guards.saved)(*guards.saved.args)  # and chain: their frames held the graph's inputs
    logs.guards(output.fn_name, guards)
    return guards


def _instance_attributes(output: OutputGraph, guard_set) -> Callable:
    """Which attribute sources the guards may read from their module's instance dict
    (`guards._Emitter.reads_dict`): attributes of an nn.Module whose class a guard checks,
    found in its __dict__ at capture and shadowed by no data descriptor of the class."""
    typed = {guard.source: guard.payload for guard in guard_set.guards if guard.kind == "type"}
    answers: dict = {}  # the emitter asks again for a source it reads twice (a hook table and its dict)

    def in_instance_dict(source) -> bool:
        answer = answers.get(source)
        if answer is None:
            answer = answers[source] = _in_instance_dict(source)
        return answer

    def _in_instance_dict(source) -> bool:
        base = source.base()
        cls = typed.get(base)
        if cls is None or not issubclass(cls, torch.nn.Module) or cls.__getattribute__ is not object.__getattribute__:
            return False
        obj = output.wrapped.get(base, (None,))[0]
        if type(obj) is not cls or source.name not in getattr(obj, "__dict__", ()):
            return False
        shadow = inspect.getattr_static(cls, source.name, None)
        return not (hasattr(type(shadow), "__set__") or hasattr(type(shadow), "__delete__"))
    return in_instance_dict


def _owner(output: OutputGraph, source):
    """The object an attribute or item was read from, when capture read it too."""
    base = source.base()
    return output.wrapped.get(base, (None,))[0] if base is not None else None


def _compile_graph(owner, output: OutputGraph, outputs: list) -> tuple[Callable | None, list[CompiledGraph]]:
    if output.op_count() == 0:
        return None, []
    gm = output.build_module([v.node for v in outputs])
    example_inputs = [gi.example for gi in output.inputs]
    gm.meta[GUARDED_INPUTS] = _guarded_layouts(owner, output)
    logs.graph_code(output.fn_name, gm)
    start = time.perf_counter()
    compiled = call_backend(owner.backend, owner.backend_name, gm, example_inputs)
    seconds = time.perf_counter() - start
    record = CompiledGraph(gm, [tuple(t.shape) if isinstance(t, torch.Tensor) else t for t in example_inputs], compiled, output.op_count(), seconds)
    return compiled, [record]


def _guarded_layouts(owner, output: OutputGraph) -> tuple | None:
    """For each graph input, the (shape, strides, dtype, device) its exact tensor guard
    proves on every call that reaches the graph, or None where no guard proves one (not a
    tensor, dynamic sizes, guards filtered by the user). A code generator may then skip
    checking what the guards already checked (codegen/wrapper.py)."""
    if owner.config.guard_filter_fn is not None:
        return None
    exact = {guard.source: guard.payload for guard in output.guards.guards if guard.kind == "tensor"}
    layouts = []
    for graph_input in output.inputs:
        signature = exact.get(graph_input.source)
        layouts.append(None if signature is None else
                       (signature.shape, signature.stride, signature.dtype, signature.device))
    return tuple(layouts)


def _eager_if_aliased(owner, output: OutputGraph, location) -> CacheEntry | None:
    """An entry that runs this call pattern eagerly when inputs the graph writes share memory."""
    reason = check_aliasing(output)
    if reason is None:
        return None
    if owner.fullgraph:
        raise GraphBreakError(BreakReason("aliased-inputs", reason, "pass tensors that do not overlap",
                                          [location] if location else []))
    logs.emit("graph_breaks", f"{location}: {reason}")
    return eager_entry(owner.fn, _build_guards(owner, output), output)


def eager_entry(fn, guards: CompiledGuards, output: OutputGraph | None = None) -> CacheEntry:
    """An entry that runs this call pattern of `fn` eagerly."""
    entry = CacheEntry(guards, lambda args, kwargs, L: fn(*args, **kwargs))
    entry.recipe = {"kind": "eager", "files": set(output.code_files) if output is not None else set()}
    return entry


def return_entry(guards: CompiledGuards, restore_fn, graphs: list | None = None) -> CacheEntry:
    """An entry whose restore function computes the whole call."""
    entry = CacheEntry(guards, lambda args, kwargs, L: restore_fn(L), graphs or [])
    entry.run_bound = restore_fn  # takes L alone: what the fast path calls
    return entry


def break_entry(fn, guards: CompiledGuards, tcode, restore_fn, resumes: list, graphs: list | None = None) -> CacheEntry:
    """An entry that runs `tcode` (fn's code with a prologue calling `restore_fn`), which continues in
    one of `resumes` after the breaking instruction."""
    code = fn.__code__
    transformed = types.FunctionType(tcode, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)
    hidden = dict(zip(hidden_parameters(len(resumes)), [restore_fn, TailCall, *resumes]))
    transformed.__kwdefaults__ = {**(fn.__kwdefaults__ or {}), **hidden}
    entry = CacheEntry(guards, lambda args, kwargs, L: transformed(*args, **kwargs), graphs or [])
    entry.transformed_code = tcode
    return entry


def rebuilt_entry(function, kind: str, guard_data: bytes, restore: tuple | None = None, tcode=None,
                  resumes: list = ()) -> CacheEntry:
    """An entry rebuilt over `function` (a CompiledFunction) from what another function's entry
    was made of (the warm-start cache's record, or a closure of the same code): its guards as
    saved data, and for a graph, the restore function's (text, constants, compiled graph, name);
    for a break, the transformed code and the resume functions it continues in."""
    fn = function.fn
    guards = load_guards(guard_data, fn.__globals__, fn.__closure__,
                         native=native_guards.for_config(function.config))
    native_guards.settle_when_built(function.config, function, guards)  # where it is still being built
    if kind == "eager":
        return eager_entry(fn, guards)
    text, constants, compiled, fn_name = restore
    restore_fn = build_restore(text, constants, compiled, fn_name, fn.__globals__, fn.__closure__)
    return return_entry(guards, restore_fn) if kind == "return" else \
        break_entry(fn, guards, tcode, restore_fn, resumes)


def _finish_return(owner, output: OutputGraph, result: Value, grad_before: bool,
                   location=None) -> CacheEntry:
    eager = _eager_if_aliased(owner, output, location)
    if eager is not None:
        return eager
    grad_now = torch.is_grad_enabled()  # set by the graph when it runs; by restore when it holds no ops
    restore = RestoreFunction(output, [result], grad_mode_after=grad_now if grad_now != grad_before else None,
                              single=True, call_graph=output.op_count() > 0)
    compiled, graphs = _compile_graph(owner, output, restore.graph_outputs)
    fn = owner.fn
    restore_fn = restore.finish(compiled, fn.__globals__, fn.__closure__)
    entry = return_entry(_build_guards(owner, output), restore_fn, graphs)
    entry.recipe = {"kind": "return", "restore": restore.recipe(compiled), "files": set(output.code_files)}
    return entry


# -- graph breaks ---------------------------------------------------------------------------
def _finish_break(owner, output: OutputGraph, frame: Frame, grad_before: bool) -> CacheEntry:
    fn = owner.fn
    code = fn.__code__
    index = frame.ip
    inst = frame.instructions[index]
    if code.co_cellvars and inst.opname in _CELL_OPERATIONS:
        raise GraphBreak("reconstruct", f"a graph break at {inst.opname}, which needs the frame's cells")
    stack = list(frame.stack)
    values, wrapped = _rebuilt_stack(frame, index, stack)
    local_names = [n for n in code.co_varnames if n in frame.locals and not n.startswith("__tj_")] + \
        [n for n in code.co_cellvars if _cell_contents(frame.cells[n]) is not None]
    for name in local_names:
        values.append(frame.locals[name] if name in frame.locals else _cell_contents(frame.cells[name]))
    # Every cell variable also travels as its cell, which closures made before the break share:
    # the resume function installs it in place of making a new one.
    cell_names = list(code.co_cellvars)
    values += [_CellMarker(frame.cells[name]) for name in cell_names]
    passed_names = [n for n in local_names if n not in code.co_cellvars] + cell_names
    eager = _eager_if_aliased(owner, output, frame.location())
    if eager is not None:
        return eager
    grad_now = torch.is_grad_enabled()
    restore = RestoreFunction(output, values, grad_mode_after=grad_now if grad_now != grad_before else None,
                              single=False, call_graph=output.op_count() > 0, wrap_indices=wrapped,
                              wrap_callee=owner.wrap_callee)
    compiled, graphs = _compile_graph(owner, output, restore.graph_outputs)
    restore_fn = restore.finish(compiled, fn.__globals__, fn.__closure__)
    successors = [(s, owner.resume_function(s.index, s.depth, passed_names, cell_names))
                  for s in _successors(frame, index, len(stack))]
    entry_index = index
    while entry_index > 0 and frame.instructions[entry_index - 1].opname in cpython.CALL_PREFIXES:
        entry_index -= 1
    root = owner.origin[0] if owner.origin is not None else owner
    tcode = transformed_code(code, index, len(stack), local_names, [s for s, _ in successors], entry_index,
                             cell_names, first_argument(root.fn.__code__))
    resumes = [resume for _, resume in successors]
    entry = break_entry(fn, _build_guards(owner, output), tcode, restore_fn, resumes, graphs)
    entry.recipe = {"kind": "break", "restore": restore.recipe(compiled), "code": tcode, "resumes": resumes,
                    "files": set(output.code_files)}
    return entry


_CELL_OPERATIONS = {"LOAD_DEREF", "STORE_DEREF", "DELETE_DEREF", "LOAD_CLOSURE", "MAKE_CELL", "LOAD_CLASSDEREF"}


def _cell_contents(cell) -> Value | None:
    """What the entry stores in the frame's own cell at the break (None: nothing).

    A cell received from a previous break (RealCellValue) is the frame's cell already,
    and holds its contents once restore has replayed the writes to it."""
    if isinstance(cell, RealCellValue):
        return None
    return cell.contents


class _CellMarker(Value):
    """A cell itself (not its contents), rebuilt once and shared by every closure over it."""

    def __init__(self, cell) -> None:
        self.cell = cell

    def reconstruct(self, cg) -> str:
        return cg.cell(self.cell)


class _ConstantMarker(Value):
    def __init__(self, obj) -> None:
        self.obj = obj

    def reconstruct(self, cg) -> str:
        return cg.constant(self.obj)


def _rebuilt_stack(frame: Frame, index: int, stack: list[Value]) -> tuple[list[Value], set[int]]:
    """The values the entry code pushes back at a break before instruction `index`, and the
    slots whose callables are compiled too (`wrap_callee`).

    A NULL cannot travel through the tuples that carry the stack, so a call's NULL becomes
    CALL_ADAPTER, which calls its first argument: before the callable up to 3.12
    (`[ADAPTER, fn, args]`), and on 3.13, where the NULL follows the callable, in the
    callable's place with the callable moved into the self slot. On 3.13 CALL_FUNCTION_EX
    ignores (and never releases) its second slot: there the NULL becomes None, which is
    immortal."""
    inst = frame.instructions[index]
    values: list[Value] = []
    for value in stack:
        values.append(_ConstantMarker(cpython.CALL_ADAPTER) if isinstance(value, NullValue) else value)
    callee = cpython.callee_slot(inst.opname, inst.arg, len(stack))
    if cpython.NULL_AFTER_CALLABLE:
        if callee is not None and _is_adapter(stack[callee]):  # a resume function's [ADAPTER, fn, ...]
            callee += 1
        for position, value in enumerate(stack):
            if value is not NULL or position == 0:
                continue
            if _null_consumer(frame, index, len(stack), position) == "CALL_FUNCTION_EX":
                values[position] = _ConstantMarker(None)
            else:
                values[position - 1], values[position] = _ConstantMarker(cpython.CALL_ADAPTER), stack[position - 1]
                if callee == position - 1:
                    callee = position
    wrapped = {callee} if callee is not None and 0 <= callee < len(values) and \
        not isinstance(values[callee], _ConstantMarker) else set()
    return values, wrapped


def _is_adapter(value: Value) -> bool:
    return getattr(value, "obj", None) is cpython.CALL_ADAPTER


def _null_consumer(frame: Frame, index: int, depth: int, position: int) -> str | None:
    """The instruction that will pop the call NULL at stack `position` (3.13), found by
    following the code from `index` as it runs when every condition falls through and every
    loop ends at once: the NULL belongs to the first instruction that pops below it."""
    instructions = frame.instructions
    for _ in range(100_000):
        if index >= len(instructions):
            return None
        inst = instructions[index]
        if inst.opname in _TERMINAL:
            return None
        if inst.opname == "FOR_ITER":
            depth -= 1  # the iterator
            index = inst.target + cpython.FOR_ITER_EXHAUSTED_SKIP
            continue
        jumps = inst.opname in cpython.UNCONDITIONAL_JUMPS
        depth += cpython.stack_effect(inst.opcode, inst.arg, jump=jumps)
        if depth <= position:
            return inst.opname
        index = inst.target if jumps else index + 1
    return None


_CONDITIONAL = cpython.CONDITIONAL_JUMPS
_TERMINAL = cpython.FRAME_EXITS


def _successors(frame: Frame, index: int, depth: int) -> list[Successor]:
    inst = frame.instructions[index]
    name = inst.opname
    if name in _TERMINAL:
        return []
    if name in _CONDITIONAL:
        return [Successor(index + 1, depth - 1, False), Successor(inst.target, depth - 1, True)]
    if name in ("JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP"):
        return [Successor(index + 1, depth - 1, False), Successor(inst.target, depth, True)]
    if name == "FOR_ITER":
        exhausted = inst.target + cpython.FOR_ITER_EXHAUSTED_SKIP
        return [Successor(index + 1, depth + 1, False), Successor(exhausted, depth - 1, True)]
    if name == "CALL":  # [NULL|callable, callable|self, *args] -> result (PRECALL's share included on 3.11)
        return [Successor(index + 1, depth - inst.arg - 1, False)]
    if name == "CALL_KW":  # [callable, self|NULL, *args, names] -> result
        return [Successor(index + 1, depth - inst.arg - 2, False)]
    if name == "CALL_FUNCTION_EX":
        return [Successor(index + 1, depth - (3 + (inst.arg & 1)) + 1, False)]
    if inst.target is not None:
        raise GraphBreak("unsupported-break", f"cannot break at jump {name}")
    return [Successor(index + 1, depth + cpython.stack_effect(inst.opcode, inst.arg, jump=False), False)]
