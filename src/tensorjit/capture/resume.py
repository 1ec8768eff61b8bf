"""Bytecode for graph breaks: the transformed entry code and the resume functions.

At a break before instruction I, the compiled entry of a function is a copy of
its code with a prologue that calls `restore(L)` (which runs the graph and
rebuilds the stack and locals), puts the rebuilt values back, and jumps to I.
I then runs natively, inside the original exception table, and each way out
of I leads to a block that returns `TailCall(resume, stack, locals)`. A resume
function is again a copy of the code, whose prologue pushes the stack it
receives as arguments and jumps to where execution continues; it is itself
compiled when called, so capture resumes after the break.

Both are built with the `bytecode` package, which keeps 3.11+ exception
tables, line tables and jump offsets right.
"""

from __future__ import annotations

import types
from dataclasses import dataclass

from bytecode import Bytecode, CellVar, ControlFlowGraph, FreeVar, Instr, Label

from . import cpython
from .breaks import GraphBreak

from .sources import STACK_PREFIX
CO_VARARGS, CO_VARKEYWORDS = 0x04, 0x08


@dataclass(frozen=True)
class TailCall:
    """Returned by transformed code: the caller continues in `resume` (no recursion in loops)."""

    resume: object
    stack: tuple
    local_values: tuple


def _real_instructions(bc: Bytecode) -> list[Instr]:
    return [x for x in bc if isinstance(x, Instr)]


def _position(bc: Bytecode, instr: Instr) -> int:
    return next(j for j, x in enumerate(bc) if x is instr)


def _after_resume(bc: Bytecode) -> int:
    for j, x in enumerate(bc):
        if isinstance(x, Instr) and x.name == "RESUME":
            return j + 1
    raise AssertionError("no RESUME instruction")


def _load_cell(name: str, lineno: int) -> Instr:
    """The cell object of cell variable `name` itself (not its contents)."""
    if cpython.CLOSURE_LOAD_IS_LOAD_FAST:
        return Instr("LOAD_FAST", name, lineno=lineno)
    return Instr("LOAD_CLOSURE", CellVar(name), lineno=lineno)


def _load(name: str, cellvars: set[str]) -> Instr:
    return Instr("LOAD_DEREF", CellVar(name)) if name in cellvars else Instr("LOAD_FAST", name)


def _store(name: str, cellvars: set[str]) -> Instr:
    return Instr("STORE_DEREF", CellVar(name)) if name in cellvars else Instr("STORE_FAST", name)


def _call_constant(fn: str, args: list[Instr], n: int, lineno: int) -> list[Instr]:
    """Call the hidden parameter `fn` with the `n` values that the instructions `args` push."""
    return cpython.call_sequence([Instr("LOAD_FAST", fn, lineno=lineno)], args, n, lineno)


def _item(state: str, index: int, lineno: int) -> list[Instr]:
    return [Instr("LOAD_FAST", state, lineno=lineno), Instr("LOAD_CONST", index, lineno=lineno),
            *cpython.subscript(lineno)]


@dataclass(frozen=True)
class Successor:
    """A way out of the break instruction: fall through, or jump, to `index` with `depth` stack items."""

    index: int
    depth: int
    is_jump: bool


def transformed_code(code: types.CodeType, break_index: int, stack_depth: int, local_names: list[str],
                     successors: list[Successor], entry_index: int | None = None,
                     cell_names: list[str] = (), original_first: str | None = None) -> types.CodeType:
    """The entry's code for a break before instruction `break_index`.

    `entry_index` is where the prologue jumps: the break instruction, or the KW_NAMES
    and PRECALL that must run before a CALL. After the stack and `local_names`, `restore`
    returns the cell of each of `cell_names`: kept in hidden locals, they are what the
    resume functions receive for those variables (with the other locals, in place of the
    cell variables' values), so closures made before the break share them with the code
    after it. The code calls `restore`, the `TailCall`
    class and one resume function per successor through hidden keyword-only parameters
    (`hidden_parameters`), which the caller fills in as defaults. `original_first`: the original
    function's `first_argument` (see `moves_first_argument`)."""
    bc = Bytecode.from_code(code, conserve_exception_block_stackdepth=True)
    real = _real_instructions(bc)
    instr = real[break_index]
    entry = real[break_index if entry_index is None else entry_index]
    lineno = instr.lineno if isinstance(instr.lineno, int) else code.co_firstlineno
    cellvars = set(code.co_cellvars)
    args = list(code.co_varnames[:_total_args(code)])
    # In a resume function, cell variables arrive as cells (no MAKE_CELL): L holds the cells.
    made = {_cell_name(x.arg) for x in bc if isinstance(x, Instr) and x.name == "MAKE_CELL"}
    arg_loads = [_load_cell(a, lineno) if a in cellvars and a not in made else _load(a, cellvars)
                 for a in args] + [Instr("BUILD_TUPLE", len(args), lineno=lineno)]
    prologue = _call_constant("__tj_restore", arg_loads, 1, lineno) + \
        [Instr("STORE_FAST", "__tj_state", lineno=lineno)]
    for j in range(stack_depth):
        prologue += _item("__tj_state", j, lineno)
    for k, name in enumerate(local_names):
        prologue += _item("__tj_state", stack_depth + k, lineno) + [_store(name, cellvars)]
    for k, name in enumerate(cell_names):
        prologue += _item("__tj_state", stack_depth + len(local_names) + k, lineno) + \
            [Instr("STORE_FAST", f"__tj_cell_{name}", lineno=lineno)]
    passed = [n for n in local_names if n not in cell_names]
    at_break = Label()
    prologue.append(Instr("JUMP_FORWARD", at_break, lineno=lineno))

    exits = []
    for n, successor in enumerate(successors):
        label = Label()
        block = [label]
        if successor.is_jump and instr.name == "FOR_ITER":  # CPython skips END_FOR (and 3.13's POP_TOP)
            block += [Instr("NOP", lineno=lineno)] * cpython.FOR_ITER_EXHAUSTED_SKIP
        block += [Instr("BUILD_TUPLE", successor.depth, lineno=lineno),
                 Instr("STORE_FAST", "__tj_stack", lineno=lineno)]
        sent = passed
        if moves_first_argument(original_first, successor.depth, passed):  # it travels before the stack
            first = original_first
            sent = [n for n in passed if n != first]
            block += [_load(first, cellvars), Instr("BUILD_TUPLE", 1, lineno=lineno),
                      Instr("LOAD_FAST", "__tj_stack", lineno=lineno), Instr("BINARY_OP", 0, lineno=lineno),
                      Instr("STORE_FAST", "__tj_stack", lineno=lineno)]
        local_loads = [_load(n, cellvars) for n in sent] + \
            [Instr("LOAD_FAST", f"__tj_cell_{name}", lineno=lineno) for name in cell_names] + \
            [Instr("BUILD_TUPLE", len(sent) + len(cell_names), lineno=lineno)]
        block += _call_constant("__tj_tail", [Instr("LOAD_FAST", f"__tj_resume{n}", lineno=lineno),
                                            Instr("LOAD_FAST", "__tj_stack", lineno=lineno),
                                            *local_loads], 3, lineno)
        block.append(Instr("RETURN_VALUE", lineno=lineno))
        exits.append((successor, label, block))

    position = _position(bc, instr)
    for successor, label, _ in exits:
        if successor.is_jump:
            instr.arg = label
            instr.name = cpython.forward_jump(instr.name)  # the exit blocks come after everything
    fallthrough = [label for s, label, _ in exits if not s.is_jump]
    if fallthrough:
        bc.insert(position + 1, Instr("JUMP_FORWARD", fallthrough[0], lineno=lineno))
    bc.insert(_position(bc, entry), at_break)
    if instr.name in cpython.NEEDS_EXACT_BOOL:
        # The rebuilt stack holds the value capture could not decide (a tensor, say): the
        # original's TO_BOOL (or converting COMPARE_OP) is before the break point.
        bc.insert(_position(bc, instr), Instr("TO_BOOL", lineno=lineno))
    start = _after_resume(bc)
    bc[start:start] = prologue
    for _, _, block in exits:
        bc.extend(block)
    # The objects the code calls arrive as keyword-only parameters with defaults, not as
    # constants: code objects are invisible to the garbage collector, so a constant that
    # refers back to the function would never be freed.
    hidden = hidden_parameters(len(successors))
    at = code.co_argcount + code.co_kwonlyargcount
    bc.argnames[at:at] = hidden
    bc.kwonlyargcount += len(hidden)
    return _assemble(bc, code)


def hidden_parameters(successors: int) -> list[str]:
    return ["__tj_restore", "__tj_tail", *[f"__tj_resume{n}" for n in range(successors)]]


def resume_code(code: types.CodeType, resume_index: int, stack_depth: int,
                local_names: list[str], cell_names: list[str] = ()) -> types.CodeType:
    """A copy of `code` taking the stack and `local_names`, continuing at `resume_index`.
    The variables of `cell_names` arrive as cells: their MAKE_CELL is left out, so the
    argument slot keeps the cell that closures made before the break also hold."""
    bc = Bytecode.from_code(code, conserve_exception_block_stackdepth=True)
    real = _real_instructions(bc)  # `resume_index` counts the original's instructions
    target = real[resume_index]
    if cell_names:
        bc[:] = [x for x in bc if not (isinstance(x, Instr) and x.name == "MAKE_CELL"
                                       and _cell_name(x.arg) in cell_names)]
    lineno = target.lineno if isinstance(target.lineno, int) else code.co_firstlineno
    label = Label()
    bc.insert(_position(bc, target), label)
    stack_names = [f"{STACK_PREFIX}{j}" for j in range(stack_depth)]
    prologue = [Instr("LOAD_FAST", n, lineno=lineno) for n in stack_names]
    prologue.append(Instr("JUMP_FORWARD", label, lineno=lineno))
    start = _after_resume(bc)
    bc[start:start] = prologue
    if moves_first_argument(first_argument(code), stack_depth, local_names):
        first = first_argument(code)
        bc.argnames = [first] + stack_names + [n for n in local_names if n != first]
    else:
        bc.argnames = stack_names + list(local_names)
    bc.argcount = len(bc.argnames)
    bc.posonlyargcount = 0
    bc.kwonlyargcount = 0
    bc.flags &= ~(CO_VARARGS | CO_VARKEYWORDS)
    bc.name = f"{code.co_name}_resume_at_{real[resume_index].lineno}"
    return _assemble(bc, code)


def first_argument(code: types.CodeType) -> str | None:
    """The original function's first argument (`self`, `cls`) where it is a plain local."""
    if not _total_args(code) or code.co_varnames[0] in code.co_cellvars:
        return None
    return code.co_varnames[0]


def moves_first_argument(first: str | None, stack_depth: int, local_names: list[str]) -> bool:
    """Whether the original's first argument `first` travels to the resume function ahead of the
    stack, into its first local slot: a zero-argument `super()` reads that slot on 3.11 (a resume
    function otherwise takes the stack first). The exit blocks of entries (of the function and of
    its resume functions) and the resume code agree by asking this of the original's `first`."""
    return bool(stack_depth) and first is not None and first in local_names


def _assemble(bc: Bytecode, code: types.CodeType) -> types.CodeType:
    """Bytes for a copy of `code` whose prologue jumps into the middle of it.

    The code before the jump target is now unreachable, and with it the TryBegin of a try
    block the target is inside. `bytecode` finds exception-handler stack depths by walking
    reachable code, so it would never see that handler and would write the depth as 32768:
    on 3.12 a raise there then skipped the handler's POP_EXCEPT and left the exception in
    sys.exc_info() after the caller had handled it. The prologue rebuilds exactly the stack
    the original had at the target, so the original depths (kept on each TryBegin by
    from_code(conserve_exception_block_stackdepth=True)) are the right ones; the original stack size covers the handlers, and the
    reachable walk covers the prologue and exit blocks.

    Entering a `with` block from the middle is beyond that walk ("negative size"): there the
    size is bounded without it (`_bound_without_walk`)."""
    try:
        reachable = ControlFlowGraph.from_bytecode(bc).compute_stacksize(compute_exception_stack_depths=False)
    except RuntimeError:
        reachable = _bound_without_walk(bc, code)
    return bc.to_code(stacksize=max(reachable, code.co_stacksize), compute_exception_stack_depths=False)


def _bound_without_walk(bc: Bytecode, code: types.CodeType) -> int:
    """A stack size for code the walk cannot follow (a `with` block entered from the middle, whose
    `__exit__` the walk never saw pushed: "negative size"). The prologue rebuilds exactly the stack
    the original had at the target, so from there on the original's size holds; the prologue and
    the exit blocks hold at most the stack, the arguments or the locals, and a call's few slots."""
    return code.co_stacksize + len(bc.argnames) + code.co_nlocals + 8


def _cell_name(arg) -> str:
    return arg.name if isinstance(arg, (CellVar, FreeVar)) else str(arg)


def _total_args(code: types.CodeType) -> int:
    n = code.co_argcount + code.co_kwonlyargcount
    if code.co_flags & CO_VARARGS:
        n += 1
    if code.co_flags & CO_VARKEYWORDS:
        n += 1
    return n
