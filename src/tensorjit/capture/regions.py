"""nested_compile_region: one subgraph for every call of a region with equal inputs.

torch.compile traces a function marked with `torch.compiler.nested_compile_region` (or
tensorjit.compiler's) into one subgraph and calls it from every call site whose guards hold
(`invoke_subgraph`). Capture inlines each call, so that everything the region reads is guarded
where it is read, as for any function; then it outlines the nodes the call made into a subgraph:
the call's external inputs (its arguments, the parameters it read, earlier values) become the
subgraph's placeholders, and a call whose subgraph has the same operations over inputs of the same
metadata as an earlier one's calls the same submodule (`region_0`). The graph holds one submodule
per distinct region and a `call_module` per call site, as Dynamo's holds one subgraph and an
invoke_subgraph per call site.

A call is left inline (still correct, one graph) when outlining it would change what the graph
means: it made Python-visible side effects (writes to input storages among them), wrote to a
tensor in place (dead-code elimination keeps an in-place node, not a call of a submodule whose
results are unused), returned something other than tensors and tuples/lists of them, or made
submodules of its own.
"""

from __future__ import annotations

import operator
from typing import Any, Callable

import torch
import torch.fx
from .subgraphs import external_inputs, pure, subgraph_module, visible_effects
from .values.containers import ListValue, TupleValue
from .values.functions import FunctionValue
from .values.tensors import TensorValue

REGION_MARKS = ("_tensorjit_nested_compile_region", "__marked_compile_region_fn__")


def is_compile_region(fn_value) -> bool:
    """Whether the function value stands for a function marked by nested_compile_region."""
    real = getattr(fn_value, "fn", None)
    return getattr(real, REGION_MARKS[0], False) is True or hasattr(real, REGION_MARKS[1])


def region_function(fn_value):
    """The function to inline for a marked function value: torch's marker returns a wrapper whose
    eager call is the function it marks (its `__marked_compile_region_fn__`), inlined in its place."""
    real = getattr(fn_value, "fn", None)
    if not hasattr(real, REGION_MARKS[1]):
        return fn_value
    while hasattr(real, REGION_MARKS[1]):
        real = getattr(real, REGION_MARKS[1])
    return FunctionValue(real)


def capture_region(tx, inline: Callable[[], Any]):
    """`inline()` (the call, inlined), with the nodes it made outlined into a shared subgraph."""
    output = tx.output
    before = set(output.graph.nodes)
    effects = visible_effects(output)
    result = inline()
    made = [n for n in output.graph.nodes if n not in before and n.op != "placeholder"]
    if not made or visible_effects(output) != effects:
        return result
    leaves = _tensor_leaves(result)
    if leaves is None or any(not pure(n) for n in made):
        return result
    _outline(output, made, leaves)
    return result


def _tensor_leaves(value) -> list | None:
    if isinstance(value, TensorValue):
        return [value]
    if isinstance(value, (TupleValue, ListValue)):
        found = [_tensor_leaves(item) for item in value.items]
        return None if any(f is None for f in found) else [leaf for group in found for leaf in group]
    return None


def _outline(output, made: list[torch.fx.Node], leaves: list) -> None:
    graph = output.graph
    inside = set(made)
    returned = [leaf.node for leaf in leaves if leaf.node in inside]
    if any(user not in inside for node in made for user in node.users):
        return  # a value of the call is read elsewhere already (cannot happen without a side effect)
    external = external_inputs(made)
    key = _key(made, external, returned)
    name = output.regions.get(key)
    if name is None:
        name = output.regions[key] = output.unique_name("region")
        output.submodules[name] = subgraph_module(made, external, returned, "NestedCompileRegion")
    with graph.inserting_after(made[-1]):
        call = graph.call_module(name, tuple(external))
    call.meta["example_value"] = tuple(n.meta["example_value"] for n in returned)
    items = {}
    previous = call
    for index, node in enumerate(returned):
        with graph.inserting_after(previous):
            item = graph.call_function(operator.getitem, (call, index))
        item.meta["example_value"] = node.meta["example_value"]
        items[node] = previous = item
    for leaf in leaves:
        if leaf.node in items:
            leaf.node = items[leaf.node]
    for node in reversed(made):
        graph.erase_node(node)


def _key(made: list[torch.fx.Node], external: list[torch.fx.Node], returned: list[torch.fx.Node]) -> tuple:
    """The region's operations over numbered inputs, and the inputs' metadata: equal keys, equal subgraphs."""
    numbers = {node: ("input", i) for i, node in enumerate(external)}
    numbers.update({node: ("node", i) for i, node in enumerate(made)})

    def canonical(argument):
        return torch.fx.node.map_arg(argument, lambda n: numbers[n])
    operations = tuple((n.op, n.target, repr(canonical(n.args)), repr(canonical(n.kwargs))) for n in made)
    return operations, tuple(_metadata(n.meta.get("example_value")) for n in external), \
        tuple(numbers[n] for n in returned)


def _metadata(example) -> Any:
    if isinstance(example, torch.Tensor):
        # not requires_grad: the subgraph's operations are the same either way (autograd follows the values)
        # sizes as text: symbolic ones (s0) are not hashable, and equal symbols are equal sizes
        return ("tensor", tuple(map(str, example.shape)), tuple(map(str, example.stride())), example.dtype,
                example.device)
    return ("value", repr(example))
