"""Index simplification with the loop ranges known.

Takes an `ir.Index` and the size of every loop variable in it; returns an
equivalent, simpler index. Views compose into chains like
`((i0 * 256 + i1) // 256) % 128 * 256 + (i0 * 256 + i1) % 256`: correct, but a
division per element and opaque to the vectoriser. Here an index is put in a
normal form, a sum of coefficient * atom plus a constant, where an atom is a
loop variable or a floor division / remainder that could not be removed, each
with its value range. Three rules do the work:

- (A + B) // d = A / d when every coefficient of A is a multiple of d and
  0 <= B < d over the ranges (and the mirror rule for remainders: (A + B) % m = B);
- x // d = 0 and x % m = x when 0 <= x < d (resp. m);
- c * a * (x // a) + c * (x % a) = c * x (a reshape split and joined again).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import ir


@dataclass(frozen=True)
class Atom:
    """A loop variable, or ("floordiv" | "mod", normal form, divisor)."""

    index: ir.Index
    low: int
    high: int


class Sum:
    """sum(coefficient * atom) + constant, with the bounds that follow from the atoms' ranges."""

    def __init__(self, terms: dict | None = None, constant: int = 0):
        self.terms: dict[ir.Index, tuple[int, Atom]] = dict(terms or {})
        self.constant = constant

    def add(self, other: "Sum") -> "Sum":
        terms = dict(self.terms)
        for key, (coefficient, atom) in other.terms.items():
            total = terms.get(key, (0, atom))[0] + coefficient
            if total:
                terms[key] = (total, atom)
            else:
                terms.pop(key, None)
        return Sum(terms, self.constant + other.constant)

    def scale(self, factor: int) -> "Sum":
        if factor == 0:
            return Sum()
        return Sum({k: (c * factor, a) for k, (c, a) in self.terms.items()}, self.constant * factor)

    def bounds(self) -> tuple[int, int]:
        low = high = self.constant
        for coefficient, atom in self.terms.values():
            ends = (coefficient * atom.low, coefficient * atom.high)
            low, high = low + min(ends), high + max(ends)
        return low, high

    def to_index(self) -> ir.Index:
        total: ir.Index = ir.IndexConst(self.constant)
        for coefficient, atom in sorted(self.terms.values(), key=lambda item: str(item[1].index)):
            total = ir.index_add(total, ir.index_mul(atom.index, ir.IndexConst(coefficient)))
        return total


def simplify(index: ir.Index, ranges: dict[str, int]) -> ir.Index:
    """`index` simplified, given that each variable v takes values in [0, ranges[v])."""
    return normal_form(index, ranges).to_index()


def normal_form(index: ir.Index, ranges: dict[str, int]) -> Sum:
    if isinstance(index, ir.IndexConst):
        return Sum(constant=index.value)
    if isinstance(index, ir.IndirectIndex):
        # an atom in [0, size): emitters check the loaded value before using it
        node = ir.IndirectIndex(simplify_expr(index.value, ranges), index.size, index.wrap)
        return Sum({node: (1, Atom(node, 0, index.size - 1))})
    if isinstance(index, ir.IndexVar):
        size = ranges.get(index.name)
        if size == 1:
            return Sum()
        high = size - 1 if size is not None else 1 << 62
        return Sum({index: (1, Atom(index, 0, high))})
    left, right = normal_form(index.left, ranges), normal_form(index.right, ranges)
    if index.op == "add":
        return recombine(left.add(right), ranges)
    if index.op == "mul":
        if not right.terms:
            return left.scale(right.constant)
        if not left.terms:
            return right.scale(left.constant)
        return opaque(ir.IndexOp("mul", left.to_index(), right.to_index()), left, right)
    divisor = right.constant if not right.terms else None
    if divisor is None or divisor <= 0:
        return opaque(ir.IndexOp(index.op, left.to_index(), right.to_index()), left, right)
    return floordiv(left, divisor) if index.op == "floordiv" else modulo(left, divisor)


def split(value: Sum, divisor: int) -> tuple[Sum, Sum]:
    """value = multiple + rest, every coefficient of `multiple` a multiple of divisor."""
    multiple, rest = Sum(constant=value.constant - value.constant % divisor), Sum(constant=value.constant % divisor)
    for key, (coefficient, atom) in value.terms.items():
        target = multiple if coefficient % divisor == 0 else rest
        target.terms[key] = (coefficient, atom)
    return multiple, rest


def floordiv(value: Sum, divisor: int) -> Sum:
    if divisor == 1:
        return value
    multiple, rest = split(value, divisor)
    low, high = rest.bounds()
    if 0 <= low and high < divisor:
        return Sum({k: (c // divisor, a) for k, (c, a) in multiple.terms.items()}, multiple.constant // divisor)
    low, high = value.bounds()
    if low >= 0 and high < divisor:
        return Sum()
    factored = factor_out(value, divisor)
    if factored is not None:
        inner, step, _ = factored
        return floordiv(inner, divisor // step)
    index = ir.IndexOp("floordiv", value.to_index(), ir.IndexConst(divisor))
    return Sum({index: (1, Atom(index, low // divisor, high // divisor))}) if low >= 0 else \
        opaque(index, value, Sum(constant=divisor))


def modulo(value: Sum, modulus: int) -> Sum:
    if modulus == 1:
        return Sum()
    _, rest = split(value, modulus)
    low, high = rest.bounds()
    if 0 <= low and high < modulus:
        return rest
    factored = factor_out(rest, modulus)
    if factored is not None:
        inner, step, remainder = factored
        return modulo(inner, modulus // step).scale(step).add(remainder)
    if low < 0:
        # Dropping the multiples of the modulus can leave an operand that is negative (a flip's
        # 124 - j became 4 - j), while emitters print `%` with C's truncation (C++, Triton's
        # integer remainder): only a non-negative operand means the same there as here. Adding
        # a multiple back keeps the value and lifts the operand to >= 0 over the ranges.
        rest = rest.add(Sum(constant=-(low // modulus) * modulus))
    index = ir.IndexOp("mod", rest.to_index(), ir.IndexConst(modulus))
    return Sum({index: (1, Atom(index, 0, modulus - 1))})


def factor_out(value: Sum, divisor: int) -> tuple[Sum, int, Sum] | None:
    """value = step * inner + remainder with step > 1 dividing `divisor` and 0 <= remainder < step,
    so value // divisor = inner // (divisor / step) and value % divisor = (inner % (divisor /
    step)) * step + remainder. (256 * i0 + i1) // 32768 with i1 < 256 is i0 // 128."""
    for step in sorted({abs(c) for c, _ in value.terms.values()}, reverse=True):
        if step <= 1 or divisor % step:
            continue
        inner, remainder = Sum(), Sum(constant=value.constant)
        for key, (coefficient, atom) in value.terms.items():
            if coefficient % step == 0:
                inner.terms[key] = (coefficient // step, atom)
            else:
                remainder.terms[key] = (coefficient, atom)
        inner.constant, remainder.constant = remainder.constant // step, remainder.constant % step
        low, high = remainder.bounds()
        if 0 <= low and high < step and inner.bounds()[0] >= 0:
            return inner, step, remainder
    return None


def opaque(index: ir.Index, left: Sum, right: Sum) -> Sum:
    """An atom we cannot see into; its range from the operands' (or unbounded)."""
    low_left, high_left = left.bounds()
    low_right, high_right = right.bounds()
    if min(low_left, low_right) >= 0:
        return Sum({index: (1, Atom(index, 0, max(high_left, 1) * max(high_right, 1)))})
    return Sum({index: (1, Atom(index, -(1 << 62), 1 << 62))})


def recombine(value: Sum, ranges: dict[str, int]) -> Sum:
    """c*a*(x // a) + c*(x % a) -> c*x, repeatedly."""
    changed = True
    while changed:
        changed = False
        for key, (coefficient, atom) in list(value.terms.items()):
            index = atom.index
            if not (isinstance(index, ir.IndexOp) and index.op == "mod" and isinstance(index.right, ir.IndexConst)):
                continue
            modulus = index.right.value
            partner = ir.IndexOp("floordiv", index.left, index.right)
            if partner not in value.terms or value.terms[partner][0] != coefficient * modulus:
                continue
            whole = normal_form(index.left, ranges).scale(coefficient)
            rest = Sum({k: v for k, v in value.terms.items() if k not in (key, partner)}, value.constant)
            value = rest.add(whole)
            changed = True
            break
    return value


def simplify_expr(expr: ir.Expr, ranges: dict[str, int], memo: dict | None = None) -> ir.Expr:
    """`expr` with every load and index value's index simplified (shared subtrees stay shared)."""
    memo = {} if memo is None else memo
    if expr in memo:
        return memo[expr]
    if isinstance(expr, ir.Load):
        result = ir.Load(expr.buffer, simplify(expr.index, ranges), expr.dtype)
    elif isinstance(expr, ir.IndexValue):
        result = ir.IndexValue(simplify(expr.index, ranges), expr.dtype)
    elif isinstance(expr, ir.Op):
        result = ir.Op(expr.name, tuple(simplify_expr(a, ranges, memo) for a in expr.args), expr.dtype, expr.extra)
    else:
        result = expr
    memo[expr] = result
    return result
