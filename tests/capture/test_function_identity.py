"""id() of a function passed in: its identity, guarded (functions are otherwise guarded by their code)."""

import torch

import tensorjit
from conformance.harness import CountingBackend


def test_id_of_a_function_passed_in_keys_a_dict_and_is_guarded():
    def fn(x, f):
        d = {id(f): 3}
        return x * d[id(f)], id(f)

    def make():
        def nothing():
            pass
        return nothing

    backend = CountingBackend()
    opt = tensorjit.compile(fn, backend=backend, fullgraph=True)
    x = torch.randn(4)
    first, second = make(), make()
    out = opt(x, first)
    torch.testing.assert_close(out[0], x * 3)
    assert out[1] == id(first)
    assert opt(x, second)[1] == id(second)  # same code, another object: not the first answer
    assert backend.graph_count == 2


ROOT = []
ROOT[:] = [ROOT, ROOT, None, None]


def test_a_list_that_holds_itself_is_read_eagerly_without_an_internal_error():
    def fn(x):
        return ROOT[0], x + 1

    out = tensorjit.compile(fn, backend="eager")(torch.ones(2))
    assert out[0] is ROOT
    torch.testing.assert_close(out[1], torch.full((2,), 2.0))


def test_a_torch_operation_compiled_directly_writes_its_out_argument():
    backend = CountingBackend()
    compiled = tensorjit.compile(torch.add, backend=backend)
    x, out = torch.randn(2, 3), torch.zeros(2, 3)
    compiled(x, 1, alpha=2, out=out)
    torch.testing.assert_close(out, x + 2)
    assert backend.graph_count == 1


class _Annotated:
    size: int
    name: "str"


def test_get_type_hints_of_a_class_is_answered_at_capture_time():
    import typing

    def fn(x):
        hints = typing.get_type_hints(_Annotated, include_extras=True)
        return x * len(hints), hints

    out = tensorjit.compile(fn, backend="eager", fullgraph=True)(torch.ones(2))
    assert out[1] == {"size": int, "name": str}
    torch.testing.assert_close(out[0], torch.full((2,), 2.0))
