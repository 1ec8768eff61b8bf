"""Per-column values computed once: the costly parts of a pointwise kernel that depend only on
its innermost loop, evaluated into a small array before the loops.

Takes a kernel body, its innermost loop variable and the loop sizes; returns the body reading
`tj_hK[inner]` where those parts were, and the C++ lines that fill the arrays.

Why: a channels-last batch norm loops over pixels outside and channels inside, and computes
`1 / sqrt(var[c] + eps)` for every element: a vector square root and division per 16 values
(MobileNetV3-small's [12544, 16] kernel spent its 120 us there). g++ moves work out of a loop
only when it does not depend on that loop's variable; these depend on the inner one and are
invariant in the outer ones, which it does not see. Computing the same operations in the same
order, once per inner index, gives the same bits.
"""

from __future__ import annotations

import math

from .. import ir
from ..graph import TRANSCENDENTAL
from ..ops import evaluate

COSTLY = TRANSCENDENTAL | {"sqrt", "rsqrt", "truediv", "reciprocal", "pow", "fmod", "atan2"}
MAX_COLUMNS = 4096  # elements of one hoisted array, on the stack


def hoist_inner(body: ir.Expr, variables, ranges: tuple[int, ...]) -> tuple[ir.Expr, dict[ir.Expr, str]]:
    """`body` with each largest costly subexpression over the innermost loop variable alone
    replaced by a load of its array, and the arrays' names by the expression they hold. Nothing
    is hoisted where there is one loop, no outer iterations to save or an inner loop too long
    for the stack."""
    if len(ranges) < 2 or math.prod(ranges[:-1]) < 2 or not 0 < ranges[-1] <= MAX_COLUMNS:
        return body, {}
    inner = variables[-1].name
    facts: dict[ir.Expr, tuple[bool, bool]] = {}  # (has a costly op, reads only by the inner variable)

    def learn(expr: ir.Expr) -> tuple[bool, bool]:
        if expr not in facts:
            if isinstance(expr, ir.Op):
                children = [learn(a) for a in expr.args]
                facts[expr] = (expr.name in COSTLY or any(c for c, _ in children), all(o for _, o in children))
            else:
                facts[expr] = (False, ir.variables_of(expr) <= {inner} and not ir.reads_indirectly(expr))
        return facts[expr]

    hoisted: dict[ir.Expr, str] = {}
    memo: dict[ir.Expr, ir.Expr] = {}

    def visit(expr: ir.Expr) -> ir.Expr:
        if expr not in memo:
            if not isinstance(expr, ir.Op):
                memo[expr] = expr
            elif learn(expr) == (True, True):
                name = hoisted.setdefault(expr, f"tj_h{len(hoisted)}")
                memo[expr] = ir.Load(name, ir.IndexVar(inner), expr.dtype)
            else:
                memo[expr] = ir.Op(expr.name, tuple(visit(a) for a in expr.args), expr.dtype, expr.extra)
        return memo[expr]

    return visit(body), hoisted


def hoisted_lines(hoisted: dict[ir.Expr, str], variables, ranges, emitter_type, ctypes) -> tuple[list[str], set]:
    """C++ that fills every hoisted array in one loop over the innermost variable, and the
    buffers it reads."""
    if not hoisted:
        return [], set()
    inner, size = variables[-1].name, ranges[-1]
    emitter = emitter_type("    ")
    memo: dict = {}
    stores = [f"    {name}[{inner}] = {evaluate(expr, emitter, memo)};" for expr, name in hoisted.items()]
    arrays = [f"  alignas(64) {ctypes[expr.dtype]} {name}[{size}];" for expr, name in hoisted.items()]
    loop = f"  for (int64_t {inner} = 0; {inner} < {size}L; ++{inner}) {{"
    return arrays + [loop] + emitter.lines + stores + ["  }"], emitter.buffers
