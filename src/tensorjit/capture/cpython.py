"""What differs between the CPython versions capture runs on (3.11, 3.12, 3.13), in one place.

The interpreter (`interpreter.py`, `opcodes.py`), the break converter (`convert.py`) and
the entry and resume bytecode (`resume.py`) ask this module instead of testing the version
themselves; it is also where capture reads CPython's tables through `dis` (jump opcodes,
stack effects, the exception table). The facts, by version:

- Calls: 3.11 and 3.12 push `[NULL or method, callable or self, *args]`; 3.13 pushes
  `[callable, self or NULL, *args]` (LOAD_GLOBAL, LOAD_ATTR and LOAD_SUPER_ATTR put
  their NULL after the value, PUSH_NULL follows the callable). Keyword names come from
  KW_NAMES before CALL up to 3.12 and from the stack through CALL_KW on 3.13;
  3.11 has PRECALL before every CALL.
- Loops: when the iterator ends, FOR_ITER jumps to its target (3.11), one instruction
  past it, skipping END_FOR (3.12), or two past it, skipping END_FOR and POP_TOP (3.13).
- Truth: on 3.13 POP_JUMP_IF_TRUE/FALSE and UNARY_NOT take an exact bool (a TO_BOOL
  precedes them, or a COMPARE_OP that converts); given any other object they read it
  as true, so code that enters one of them with a rebuilt stack converts first.
- Jumps: 3.11 has forward and backward variants of each conditional jump
  (POP_JUMP_FORWARD_IF_TRUE...); from 3.12 one name jumps either way.
- Attributes: from 3.12 LOAD_ATTR with its low bit set loads a method and its self, as
  3.11's LOAD_METHOD does.
- Frame exits: RETURN_CONST exists on 3.12 and 3.13 only.
- Tables: the exception table (3.11+, offsets in bytes) is read with `dis`'s parser;
  line numbers come from each instruction's `positions` (the 3.11+ location table).
- ENTER_EXECUTOR (3.13's entry into optimised traces) lives only in the code's adaptive
  copy: `co_code`, which `dis` and `bytecode` read, never holds it.
- 3.14 (not run yet; anticipated where cheap): BINARY_SUBSCR becomes BINARY_OP with
  NB_SUBSCR, small ints and immortal constants get their own loads, RETURN_CONST goes.
"""

from __future__ import annotations

import dis
import sys
import types

from bytecode import Instr

PY = sys.version_info[:2]
PY311, PY312, PY313, PY314 = (3, 11), (3, 12), (3, 13), (3, 14)

UP_TO_312 = (PY311, PY312)
FROM_312 = (PY312, PY313, PY314)
FROM_313 = (PY313, PY314)
"""Sets of versions that opcode handlers register for (`opcodes.opcode`)."""

# -- calls ------------------------------------------------------------------------------------
NULL_AFTER_CALLABLE = PY >= PY313
"""3.13: the call's NULL sits after the callable, in the `self` slot."""

KW_NAMES_INSTRUCTION = PY < PY313
"""Up to 3.12 keyword names arrive through KW_NAMES before CALL; 3.13 has CALL_KW."""

CALL_PREFIXES = ("KW_NAMES", "PRECALL")
"""Instructions that belong to the CALL after them: a jump to the CALL must run them too."""


def callee_slot(opname: str, arg: int, depth: int) -> int | None:
    """The stack slot of the callable that instruction `opname` calls on a stack `depth`
    deep, if it is a call."""
    if NULL_AFTER_CALLABLE:
        if opname == "CALL":
            return depth - arg - 2  # [callable, self|NULL, args...]
        if opname == "CALL_KW":
            return depth - arg - 3  # [callable, self|NULL, args..., names]
        if opname == "CALL_FUNCTION_EX":
            return depth - (4 if arg & 1 else 3)  # [callable, unused, args, kwargs?]
        return None
    if opname == "CALL":
        return depth - arg - 1  # [NULL|method, callable|self, args...]: the callable's slot
    if opname == "CALL_FUNCTION_EX":
        return depth - (3 if arg & 1 else 2)
    return None


LOAD_ATTR_LOADS_METHODS = PY >= PY312
"""3.12+: LOAD_ATTR with its low bit set pushes a method and its self (3.11 has LOAD_METHOD)."""

# -- control flow -------------------------------------------------------------------------------
FOR_ITER_EXHAUSTED_SKIP = 2 if PY >= PY313 else 1 if PY == PY312 else 0
"""Instructions after FOR_ITER's target that CPython skips when the iterator ends."""

NEEDS_EXACT_BOOL = frozenset({"POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "UNARY_NOT"}) if PY >= PY313 \
    else frozenset()
"""Instructions that misread anything but True or False (3.13: TO_BOOL normally precedes them)."""

UNCONDITIONAL_JUMPS = frozenset({"JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT"})

CALL_OPCODES = frozenset({"CALL", "CALL_KW"})

# -- generators ----------------------------------------------------------------------------------
SEND_POPS_RECEIVER = PY == PY311
"""When the sub-iterator of `yield from` is exhausted, 3.11's SEND pops the receiver with the
value; from 3.12 it leaves the receiver to the END_SEND at its target."""

# -- cells ---------------------------------------------------------------------------------------
CLOSURE_LOAD_IS_LOAD_FAST = PY >= PY313
"""3.13: LOAD_CLOSURE is a pseudo-instruction; a cell itself is loaded with LOAD_FAST of its name."""


def jump_variants(name: str) -> list[str]:
    """The opcodes of popping conditional jump `name` (POP_JUMP_IF_TRUE...): 3.11 has a
    forward and a backward one."""
    if PY == PY311:
        return [name.replace("POP_JUMP_IF", f"POP_JUMP_{way}_IF") for way in ("FORWARD", "BACKWARD")]
    return [name]


def conditional_jumps() -> frozenset:
    """The popping conditional jumps."""
    names = ["POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE"]
    return frozenset(variant for name in names for variant in jump_variants(name))


CONDITIONAL_JUMPS = conditional_jumps()


def forward_jump(name: str) -> str:
    """The jump that goes where backward jump `name` goes when its target is ahead of it
    (3.11's POP_JUMP_BACKWARD_IF_TRUE -> POP_JUMP_FORWARD_IF_TRUE; JUMP_BACKWARD -> JUMP_FORWARD)."""
    return name.replace("BACKWARD", "FORWARD")


FRAME_EXITS = frozenset({"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE"})
"""Instructions after which the frame runs no further instruction (RETURN_CONST: 3.12, 3.13)."""

# -- the tables of a code object, read through dis -------------------------------------------------
NOT_INSTRUCTIONS = frozenset({"EXTENDED_ARG", "CACHE"})
"""What `dis.get_instructions` lists that is no instruction of its own: an argument's prefix
(a jump may target it) and inline cache entries."""

JUMP_OPCODES = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)
"""Opcodes whose argument is a jump target (`dis` resolves it to an offset)."""


def stack_effect(opcode: int, arg: int | None, jump: bool) -> int:
    """How many values the instruction adds to the stack (negative: removes), taking the jump or not."""
    if arg is not None or opcode >= dis.HAVE_ARGUMENT:
        return dis.stack_effect(opcode, arg, jump=jump)
    return dis.stack_effect(opcode, jump=jump)


_EXCEPTION_TABLES: dict[types.CodeType, list] = {}


def exception_table(code: types.CodeType) -> list:
    """The entries of `code`'s exception table (start, end, target: offsets in bytes; depth;
    lasti), as `dis` parses them, kept per code object."""
    table = _EXCEPTION_TABLES.get(code)
    if table is None:
        table = _EXCEPTION_TABLES[code] = dis._parse_exception_table(code)
    return table

# -- operators -------------------------------------------------------------------------------------
NB_SUBSCR = 26
"""3.14's BINARY_OP argument for `a[b]` (BINARY_SUBSCR before)."""

SUBSCRIPT_IS_BINARY_OP = PY >= PY314
"""3.14: `a[b]` is BINARY_OP NB_SUBSCR."""


# -- generated bytecode -----------------------------------------------------------------------------
def _call_adapter(fn, *args, **kwargs):
    """Stands in for a NULL stack slot in generated code: calls fn like CALL would."""
    return fn(*args, **kwargs)


CALL_ADAPTER = _call_adapter
"""What a call's NULL becomes where generated code rebuilds the stack (convert._rebuilt_stack)."""


def subscript(lineno: int) -> list:
    """Instructions (for the `bytecode` package) that replace the two values on top of the
    stack, `a` and `b`, by `a[b]`."""
    if SUBSCRIPT_IS_BINARY_OP:
        return [Instr("BINARY_OP", NB_SUBSCR, lineno=lineno)]
    return [Instr("BINARY_SUBSCR", lineno=lineno)]


def call_sequence(load_callable: list, args: list, count: int, lineno: int) -> list:
    """Instructions (for the `bytecode` package) that call what `load_callable` pushes with
    the `count` values that `args` push, leaving the result on the stack."""
    null = Instr("PUSH_NULL", lineno=lineno)
    body = [*load_callable, null] if NULL_AFTER_CALLABLE else [null, *load_callable]
    body += args
    if PY == PY311:
        body.append(Instr("PRECALL", count, lineno=lineno))
    body.append(Instr("CALL", count, lineno=lineno))
    return body
