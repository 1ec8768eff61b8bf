"""Every opcode the running CPython emits for ordinary model code has a handler.

The corpus is the source of torch's module library and a few standard-library modules,
compiled by the running interpreter: on a new CPython version (3.13's CALL_KW,
superinstructions, TO_BOOL...) a missing handler shows here, by name, instead of as a
graph break in some user's model. Families capture does not handle yet are listed.
"""

import dis
import importlib
import types

from tensorjit.capture.opcodes import HANDLERS

CORPUS = ["torch.nn.modules.linear", "torch.nn.modules.conv", "torch.nn.modules.activation",
          "torch.nn.modules.normalization", "torch.nn.modules.container", "torch.nn.modules.module",
          "torch.nn.functional", "collections", "functools", "dataclasses", "contextlib", "copy", "enum"]

NOT_HANDLED = {
    # class bodies and module code, which capture never runs
    "LOAD_BUILD_CLASS", "LOAD_NAME", "STORE_NAME", "DELETE_NAME", "SETUP_ANNOTATIONS", "LOAD_LOCALS",
    "LOAD_FROM_DICT_OR_DEREF", "CALL_INTRINSIC_2",
    # async code, `yield from` and delegating generators (issue 14), deletions, class patterns
    "BEFORE_ASYNC_WITH", "GET_AWAITABLE", "GET_YIELD_FROM_ITER", "SEND", "END_SEND", "CLEANUP_THROW",
    "DELETE_ATTR", "DELETE_DEREF", "MATCH_CLASS",
}


def _opnames(code: types.CodeType, seen: set) -> None:
    for instruction in dis.get_instructions(code):
        seen.add(instruction.opname)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            _opnames(constant, seen)


def test_every_emitted_opcode_has_a_handler():
    seen: set = set()
    for name in CORPUS:
        path = importlib.import_module(name).__file__
        with open(path) as source:
            _opnames(compile(source.read(), path, "exec"), seen)
    assert seen - HANDLERS.keys() - NOT_HANDLED - {"CACHE", "EXTENDED_ARG"} == set()
