"""The bytecode of graph breaks: transformed entries and resume functions are valid code."""

import types

import torch

from tensorjit.capture.interpreter import instructions_of
from tensorjit.capture.resume import Successor, TailCall, resume_code, transformed_code


def sample(a, b):
    x = a + 1
    y = x * b
    return x + y


def index_of(fn, opname, nth=0):
    ins, _ = instructions_of(fn.__code__)
    return [i for i, inst in enumerate(ins) if inst.opname == opname][nth]


def test_resume_function_starts_in_the_middle_with_given_locals():
    ins, _ = instructions_of(sample.__code__)
    return_line = ins[index_of(sample, "RETURN_VALUE")].lineno
    index = next(i for i, inst in enumerate(ins) if inst.lineno == return_line)  # at `return x + y`, first load
    assert ins[index].opname in ("LOAD_FAST", "LOAD_FAST_LOAD_FAST")  # 3.13 loads both at once
    code = resume_code(sample.__code__, index, 0, ["x", "y"])
    fn = types.FunctionType(code, sample.__globals__)
    assert fn(2, 5) == 7
    assert code.co_varnames[:2] == ("x", "y")


def test_resume_function_receives_the_stack():
    index = index_of(sample, "BINARY_OP", 2)  # `x + y` with both on the stack
    code = resume_code(sample.__code__, index, 2, [])
    fn = types.FunctionType(code, sample.__globals__)
    assert fn(3, 4) == 7


def test_transformed_code_runs_the_break_instruction_then_tail_calls():
    index = index_of(sample, "BINARY_OP", 1)  # `x * b`: stack [x, b]
    state = (10, 3, 9, 3)  # stack x=10, b=3; locals a=9, b=3 ... restored as (stack..., locals...)

    def restore(L):
        return (10, 3, 9, 3)

    resume = object()
    successor = Successor(index + 1, 1, False)
    code = transformed_code(sample.__code__, index, 2, ["a", "b"], [successor])
    fn = types.FunctionType(code, sample.__globals__)
    fn.__kwdefaults__ = {"__tj_restore": restore, "__tj_tail": TailCall, "__tj_resume0": resume}
    result = fn(0, 0)
    assert isinstance(result, TailCall)
    assert result.resume is resume
    assert result.stack == (30,)
    assert result.local_values == (9, 3)
