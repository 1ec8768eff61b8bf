"""Regular expressions on constant patterns and text (polyfills/re_module.py; compiled patterns and
matches folded as immutable objects, values/builtins.py `_IMMUTABLE`): re.compile broke deep in
sre's parser, `pattern.search(text)` as an untraceable C call (unittest's assertRaisesRegex)."""

import re
import unittest

import torch

import tensorjit

_WORD = re.compile(r"(a+)b")


def _module_functions(x):
    out = [re.sub(r"\d", "#", "a1b22"), re.match("(a)(b)?", "ac").groups(), re.split(",", "a,b"),
           bool(re.compile("iterable").search("must assign iterable")), re.escape("a.b")]
    try:
        re.compile("(")
    except re.error as e:
        out.append(type(e).__name__)
    return x + 1, out


def _pattern_methods(x):
    m = _WORD.search("xxaab")
    return x + 1, [m.group(1), m.span(), _WORD.match("xxaab") is None, _WORD.sub("-", "aab ab"),
                   _WORD.findall("ab aab"), bool(m)]


def test_regular_expressions_match_eager():
    x = torch.ones(2)
    for fn in (_module_functions, _pattern_methods):
        assert tensorjit.compile(fn, backend="eager", fullgraph=True)(x)[1] == fn(x)[1]


def test_assert_raises_regex_in_the_graph():
    case = unittest.TestCase()

    def fn(x):
        p = [1, 2, 3]
        case.assertRaisesRegex(TypeError, "iterable", p.__setitem__, slice(1, 3), 1)
        return x + 1

    x = torch.ones(2)
    torch.testing.assert_close(tensorjit.compile(fn, backend="eager", fullgraph=True)(x), x + 1)
