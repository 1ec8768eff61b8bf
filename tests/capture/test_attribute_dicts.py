"""Dict subclasses whose attribute dunders are dict's own methods (`__getattr__ = dict.get`,
`__setattr__ = dict.__setitem__`, `__delattr__ = dict.__delitem__`): still dicts to capture
(values/container_subclasses.py ROUTED_ATTRIBUTES), attribute access being item access."""

import torch

import tensorjit


class dotdict(dict):
    __getattr__ = dict.get
    __setattr__ = dict.__setitem__
    __delattr__ = dict.__delitem__


class strictdict(dict):
    __getattr__ = dict.__getitem__


def test_one_from_outside_is_read_and_written_as_a_dict():
    config = dotdict({"a": 1, "b": 2})

    def fn(x):
        out = x * config.get("a", 3) + config.b
        config.c = 5
        del config.a
        return out, config.missing

    compiled = tensorjit.compile(fn, backend="eager", fullgraph=True)
    out, missing = compiled(torch.ones(2))
    torch.testing.assert_close(out, torch.full((2,), 3.0))
    assert missing is None and config == {"b": 2, "c": 5}
    config.update(a=10, b=20)  # other values: the guards see them
    out, _ = compiled(torch.ones(2))
    torch.testing.assert_close(out, torch.full((2,), 30.0))


def test_one_made_in_the_function_keeps_its_class():
    def fn(x):
        d = dotdict(a=x)
        d.b = x + 1
        del d.a
        return d.b * 2, d.missing, d

    doubled, missing, d = tensorjit.compile(fn, backend="eager", fullgraph=True)(torch.ones(2))
    assert type(d) is dotdict and list(d) == ["b"] and missing is None
    torch.testing.assert_close(doubled, torch.full((2,), 4.0))


def test_a_missing_item_through_getitem_raises_key_error():
    def fn(x):
        d = strictdict(a=1)
        try:
            return x + d.b
        except KeyError:
            return x - d.a

    torch.testing.assert_close(tensorjit.compile(fn, backend="eager", fullgraph=True)(torch.ones(2)), torch.zeros(2))


class ItemConfig(dict):
    def __getattr__(self, name):  # written in Python: inlined where normal lookup fails
        return self[name]


def test_a_python_getattr_answers_where_lookup_fails():
    def fn(cfg, x):
        try:
            missing = cfg.missing
        except KeyError:
            missing = 0
        return x + cfg.offset + missing, cfg.get("offset")

    cfg = ItemConfig(offset=5)
    out, offset = tensorjit.compile(fn, backend="eager", fullgraph=True)(cfg, torch.zeros(2))
    torch.testing.assert_close(out, torch.full((2,), 5.0))
    assert offset == 5
