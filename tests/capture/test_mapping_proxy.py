"""types.MappingProxyType: a read-only view of a dict, made in the function or passed in."""

import types

import pytest
import torch

import tensorjit

SHARED = {"a": 2, "b": 3, "c": 5}


def _compiled(fn, fullgraph=True):
    return tensorjit.compile(fn, backend="eager", fullgraph=fullgraph)


def test_a_proxy_made_in_the_function_reads_and_is_returned_as_a_proxy():
    def fn(x):
        d = {"a": 2, "b": 3, "c": 5 * x}
        mp = types.MappingProxyType(d)
        y = torch.sin(x * mp["a"])
        for _, v in mp.items():
            y = y + torch.cos(x * v)
        return mp, y, isinstance(mp, types.MappingProxyType), len(mp), "a" in mp, mp.get("z", 1), dict(mp)["b"]

    x = torch.randn(3)
    out, ref = _compiled(fn)(x), fn(x)
    assert type(out[0]) is types.MappingProxyType
    torch.testing.assert_close(out[1:], ref[1:])


def test_a_proxy_sees_writes_to_its_dict_before_and_after_the_call():
    def fn(x):
        mp = types.MappingProxyType(SHARED)
        SHARED["d"] = 4
        return mp, x * mp["a"] + mp["d"]

    try:
        mp, y = _compiled(fn)(torch.ones(2))
        torch.testing.assert_close(y, torch.full((2,), 6.0))
        SHARED["e"] = 5
        assert mp["e"] == 5
    finally:
        SHARED.pop("d", None)
        SHARED.pop("e", None)


def test_a_proxy_passed_in_is_guarded_on_its_dict():
    viewed = {"a": 2, "b": 3}
    proxy = types.MappingProxyType(viewed)

    def fn(x, mp):
        y = x * mp["a"]
        for _, v in mp.items():
            y = y + v
        return y

    compiled = _compiled(fn)
    x = torch.ones(2)
    for change in (lambda: None, lambda: viewed.update(a=3), lambda: viewed.pop("b")):
        change()
        torch.testing.assert_close(compiled(x, proxy), fn(x, proxy))


def test_writing_through_a_proxy_raises_type_error():
    def fn(x, mp):
        try:
            mp["q"] = 1
        except TypeError as e:
            return x + 1, str(e)
        return x, ""

    proxy = types.MappingProxyType({"a": 1})
    assert _compiled(fn)(torch.ones(1), proxy)[1] == fn(torch.ones(1), proxy)[1]
    with pytest.raises(AttributeError):
        _compiled(lambda x, mp: mp.pop("a"), fullgraph=False)(torch.ones(1), proxy)
