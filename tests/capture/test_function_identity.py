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
