"""Loop shapes for the C++ kernels: adjacent loops merged into one where every index walks them as
one run of memory, and a pointwise kernel's loops put in its output's memory order.

Takes a kernel's loop variables and ranges, its body and the indices it stores at;
returns fewer, longer loops and the body and indices rewritten over them. A
[576, 7, 7] pointwise kernel over contiguous buffers becomes [576, 49] and then
[28224]: one loop the vectoriser fills, instead of 4032 loops of 7 (MobileNet's
late stages ran 3 ns per element, mostly loop overhead and vector remainders).

Loops i (size a, outer) and j (size b, inner) merge into m (size a * b) with
i = m // b and j = m % b substituted everywhere; the merge is kept only if, after
simplification (simplify.py folds b * (m // b) + m % b into m), m appears in no
division, remainder or product of variables: each index is then linear in m and
no per-element division is added. Only the C++ emitter uses it (Triton flattens a
pointwise kernel into one range already).
"""

from __future__ import annotations

from .. import ir
from ..simplify import simplify, simplify_expr
from ..schedule import linear_form
from ..squeeze import substitute


def memory_order(variables, ranges, store_index) -> tuple[tuple, tuple]:
    """A pointwise kernel's loops ordered by the strides it stores at, largest outside: a
    channels-last output (strides C*H*W, 1, W*C, C) is written in memory order, the channel
    loop innermost, instead of one element every C."""
    form = linear_form(store_index)
    if form is None:
        return tuple(variables), tuple(ranges)
    order = sorted(range(len(variables)), key=lambda k: -abs(form[0].get(variables[k].name, 0)))
    return tuple(variables[k] for k in order), tuple(ranges[k] for k in order)


def merge_loops(variables, ranges, body, indices=(), sizes=None):
    """(variables, ranges, body, indices) with adjacent loops of `variables` merged where every
    index stays linear. `sizes`: the sizes of the other loop variables the body uses (a
    group's rows, a reduction's outer loops)."""
    variables, ranges = list(variables), list(ranges)
    sizes = dict(sizes or {})
    mapping: dict[str, ir.Index] = {}
    originals = {v.name: v for v in variables}
    position = len(variables) - 1
    while position > 0:
        outer, inner, inner_size = variables[position - 1], variables[position], ranges[position]
        step = {outer.name: ir.IndexOp("floordiv", outer, ir.IndexConst(inner_size)),
                inner.name: ir.IndexOp("mod", outer, ir.IndexConst(inner_size))}
        trial = {name: substitute(value, step) for name, value in mapping.items()} if mapping else {}
        trial.update({name: step[name] for name in step if name in originals and name not in mapping})
        trial_ranges = dict(zip((v.name for v in variables), ranges), **sizes)
        trial_ranges[outer.name] = ranges[position - 1] * inner_size
        del trial_ranges[inner.name]
        rewritten = _rewrite(body, indices, trial, trial_ranges)
        if rewritten is not None and _linear_everywhere(rewritten, outer.name):
            mapping = trial
            ranges[position - 1] *= inner_size
            del variables[position], ranges[position]
        position -= 1
    if not mapping:
        return tuple(variables), tuple(ranges), body, tuple(indices)
    final_ranges = dict(zip((v.name for v in variables), ranges), **sizes)
    new_body, new_indices = _rewrite(body, indices, mapping, final_ranges)
    return tuple(variables), tuple(ranges), new_body, tuple(new_indices)


def _rewrite(body, indices, mapping, ranges):
    memo: dict = {}
    new_body = simplify_expr(substitute(body, mapping, memo), ranges)
    new_indices = [simplify(substitute(index, mapping, memo), ranges) for index in indices]
    return new_body, new_indices


def _linear_everywhere(rewritten, name: str) -> bool:
    body, indices = rewritten
    return all(_linear_in(index, name) for index in list(indices) + list(_indices_of(body)))


def _indices_of(expr, seen=None):
    """Every index a scalar expression reads at (loads and index values, through indirect indices)."""
    seen = set() if seen is None else seen
    if expr in seen:
        return
    seen.add(expr)
    if isinstance(expr, (ir.Load, ir.IndexValue)):
        yield expr.index
        for node in ir.indirect_indices(expr.index):
            yield from _indices_of(node.value, seen)
    elif isinstance(expr, ir.Op):
        for argument in expr.args:
            yield from _indices_of(argument, seen)


def _linear_in(index, name: str) -> bool:
    """Does `name` appear in `index` only in sums and products with constants?"""
    if isinstance(index, ir.IndexOp):
        if index.op == "add":
            return _linear_in(index.left, name) and _linear_in(index.right, name)
        if index.op == "mul" and (isinstance(index.left, ir.IndexConst) or isinstance(index.right, ir.IndexConst)):
            return _linear_in(index.left, name) and _linear_in(index.right, name)
        return name not in ir.variables_of(index)
    return True  # a variable, a constant, or an indirect index (its loads are checked on their own)
