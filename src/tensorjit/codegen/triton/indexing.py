"""Index arithmetic as Triton text.

`index_text(expression, names)` takes an index expression (a sympy
expression over iteration variables, or a plain int) and a mapping from each
variable to the Triton text it stands for, and returns Triton source text.
`split_index(flat, sizes)` returns the text of each coordinate of a flat
index over a row-major iteration space, e.g. `(xindex // 12) % 5`.

Floor division and remainder on indices are on non-negative values, where
Triton's truncating `//` and `%` agree with Python's.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import sympy


def split_index(flat: str, sizes: Sequence[int]) -> list[str]:
    """Coordinates of `flat` over row-major `sizes`; size-1 dimensions are 0."""
    coordinates: list[str] = []
    stride = 1
    for position in reversed(range(len(sizes))):
        size = sizes[position]
        if size == 1:
            coordinates.append("0")
        else:
            quotient = flat if stride == 1 else f"({flat} // {stride})"
            is_outermost = all(s == 1 for s in sizes[:position])
            coordinates.append(quotient if is_outermost else f"({quotient} % {size})")
        stride *= size
    return list(reversed(coordinates))


def index_text(expression, names: Mapping[sympy.Symbol, str] | Mapping[str, str]) -> str:
    if isinstance(expression, int):
        return str(expression)
    if isinstance(expression, str):
        return expression
    by_name = {str(symbol): text for symbol, text in names.items()}
    return _print(sympy.sympify(expression), by_name)


def _print(expression: sympy.Expr, names: Mapping[str, str]) -> str:
    if expression.is_Integer:
        return str(int(expression))
    if expression.is_Symbol:
        return f"({names[expression.name]})" if expression.name in names else expression.name
    if expression.is_Add:
        return " + ".join(_print(term, names) for term in expression.args)
    if expression.is_Mul:
        return " * ".join(_parenthesised(factor, names) for factor in expression.args)
    if isinstance(expression, sympy.floor) and isinstance(expression.args[0], sympy.Mul):
        numerator, denominator = expression.args[0].as_numer_denom()
        return f"(({_print(numerator, names)}) // {_print(denominator, names)})"
    if isinstance(expression, sympy.Mod):
        left, right = expression.args
        return f"(({_print(left, names)}) % {_parenthesised(right, names)})"
    if expression.is_Pow and expression.exp.is_Integer and expression.exp > 0:
        return " * ".join([_parenthesised(expression.base, names)] * int(expression.exp))
    name = type(expression).__name__
    if name in ("FloorDiv",):
        left, right = expression.args
        return f"(({_print(left, names)}) // {_parenthesised(right, names)})"
    if name in ("ModularIndexing",):
        base, divisor, modulus = expression.args
        return f"((({_print(base, names)}) // {_parenthesised(divisor, names)}) % {_parenthesised(modulus, names)})"
    raise NotImplementedError(f"triton emitter: cannot print index expression {expression!r}")


def _parenthesised(expression: sympy.Expr, names: Mapping[str, str]) -> str:
    text = _print(expression, names)
    return text if expression.is_Atom else f"({text})"
