"""The inference graph of a captured graph with repeated blocks, tracing one block and stamping the rest.

    trace_by_segments(gm, example_inputs, decompositions) -> (GraphModule, ReuseCount) | None

The captured graph is cut where `repeats.find_repeats` found its blocks: the prefix (with every
placeholder), block 1, blocks 2..k, the suffix. Each segment is traced with make_fx on fake tensors,
functionalized, as `joint.trace_forward` traces the whole graph, with the fake values the segments
before it produced as its inputs; and the ATen nodes are appended, in order, to one graph. A block
whose outside values have the same metadata as block 1's (sizes, strides, storage offset, dtype,
device, requires_grad), no data of its own (a fake constant) and the same sharing of storage among
them, is not traced: block 1's ATen nodes are copied with its own inputs, each copy given a fake value
of its own, made from block 1's metadata on a new storage or on the storage of the stamped value its
block-1 counterpart shares storage with (`_recipes`; about 10 us a node, where running the op on fake
tensors costs about 100 us even when FakeTensorMode's cache answers). Nodes are named as make_fx names
them, in the order a whole trace creates them, so the graph comes out as the whole trace's: same
nodes, same names, same code, values of the same metadata.

Why the pieces trace alike: a traced op depends on its arguments' metadata and constants only, and
the segments are traced under the same fake mode, decompositions and grad mode. What would carry
state across a cut is refused, and the caller traces the whole graph as before (None):
- a captured value that is not a tensor (a grad-mode or autocast switch is a node of value None,
  `.item()` a scalar: either would carry state or data across a cut), a symbolic size, a submodule
  call, a recompute tag;
- a value crossing a cut that is not a plain tensor (`repeats._clean_cut`);
- an in-place op left in a segment's trace, or an input written back (functionalization would then
  depend on which values alias across the cut);
- a value computed from constants alone crossing a cut (make_fx knows the values of the tensors it
  lifts, `get_attr`, and of ops on them alone, and may fold what reads them; a later segment would
  see a placeholder), or a fake input carrying data; a custom op that writes its arguments;
- a traced value that requires grad (`requires_grad_()` in the graph: whether the graph needs
  autograd is the whole trace's question, `autograd._traced_without_grad`);
- a stamped value whose metadata differs from block 1's (checked node by node).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
import torch.fx
from torch.fx._lazy_graph_module import _use_lazy_graph_module
from torch.fx.experimental.proxy_tensor import make_fx
from torch._subclasses.fake_tensor import FakeTensor
from torch.func import functionalize

from .. import logs
from .repeats import Repeats, example, find_repeats, metadata


@dataclass
class ReuseCount:
    """What one segmented trace did: ATen nodes traced by make_fx and stamped from a block's."""
    blocks: int = 0            # blocks found
    stamped_blocks: int = 0    # of them, copied from block 1 rather than traced
    traced_nodes: int = 0
    stamped_nodes: int = 0


class _Refused(Exception):
    """Something the segmented trace cannot prove alike: the whole graph is traced instead."""


def segmentable_repeats(gm: torch.fx.GraphModule):
    """The repeated blocks of `gm` (`repeats.find_repeats`), where its nodes allow a trace by
    segments at all; else None."""
    return find_repeats(gm) if _segmentable(gm) else None


def trace_by_segments(gm: torch.fx.GraphModule, example_inputs: list, decompositions: dict | None):
    repeats = segmentable_repeats(gm)
    if repeats is None:
        return None
    try:
        traced, count = _Tracer(gm, repeats, decompositions or {}).run(example_inputs)
    except Exception as error:  # noqa: BLE001 - _Refused, or a gap of this path: the whole trace decides
        log_traced_whole(len(repeats.blocks), "", error)
        return None
    logs.emit("compile_time", f"autograd: {count.blocks} repeated blocks, {count.stamped_blocks} stamped: "
                              f"{count.traced_nodes} ATen nodes traced, {count.stamped_nodes} stamped")
    return traced, count


def log_traced_whole(blocks: int, what: str, error: Exception) -> None:
    """One line saying why `blocks` repeated blocks (`what`: of which graph) are traced whole after
    all: a refusal's reason, or the error of a gap of this path."""
    reason = str(error) if isinstance(error, _Refused) else f"{type(error).__name__}: {error}"
    logs.emit("compile_time", f"autograd: {blocks} repeated blocks{what} traced whole: {reason}")


def _segmentable(gm: torch.fx.GraphModule) -> bool:
    for node in gm.graph.nodes:
        if node.op in ("call_module", "get_attr") or "recompute" in node.meta:
            return False
        if node.op in ("call_function", "call_method"):
            value = example(node)
            values = value if isinstance(value, (tuple, list)) else (value,)
            if not values or any(metadata(v) is None for v in values):
                return False
    return True


def _functional(gm):
    def run(*args):
        out = gm(*args)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)
    return functionalize(run, remove="mutations")


def _trace(gm, inputs: list, decompositions: dict) -> torch.fx.GraphModule:
    """`gm` (a graph module or a `_Segment`) traced as `joint.trace_forward` traces a whole graph. The
    result is a lazy graph module: its code is generated only for the whole graph, at the end."""
    with torch.no_grad(), _use_lazy_graph_module(True):
        traced = make_fx(_functional(gm), decomposition_table=decompositions, tracing_mode="fake",
                         _allow_non_fake_inputs=True)(*inputs)
    for node in traced.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) \
                and node.target._schema.is_mutable:
            raise _Refused(f"in-place op {node.target}")
        values = node.meta.get("val")
        if node.op == "call_function" and any(isinstance(v, torch.Tensor) and v.requires_grad for v in
                                              (values if isinstance(values, (tuple, list)) else (values,))):
            raise _Refused("a value requiring grad (requires_grad_() in the graph): the caller decides")
    outputs = next(n for n in traced.graph.nodes if n.op == "output").args[0]
    if _from_constants(traced) & set(outputs):
        raise _Refused("a value computed from constants alone crosses a cut")
    return traced


def _from_constants(traced: torch.fx.GraphModule) -> set:
    """Nodes computed from constants alone (tensors make_fx lifted, `get_attr`, and ops on nothing
    else). make_fx knows such values and may fold ops on them (`.item()` of a known constant is a
    number, not a node): a later segment, seeing a placeholder, would not."""
    derived = set()
    for node in traced.graph.nodes:
        inputs = node.all_input_nodes
        if node.op == "get_attr" or node.op == "call_function" and inputs and all(n in derived for n in inputs):
            derived.add(node)
    return derived


class _Tracer:
    def __init__(self, gm: torch.fx.GraphModule, repeats: Repeats, decompositions: dict):
        self.gm, self.decompositions = gm, decompositions
        body = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
        first, last = body.index(repeats.blocks[0][0]), body.index(repeats.blocks[-1][-1])
        self.prefix, self.blocks, self.suffix = body[:first], [list(b) for b in repeats.blocks], body[last + 1:]
        self.output = next(n for n in gm.graph.nodes if n.op == "output")
        self.env: dict[torch.fx.Node, torch.fx.Node] = {}   # captured node -> ATen node in `self.graph`
        self.count = ReuseCount(blocks=len(self.blocks))
        self.constants = 0   # the next `_tensor_constant<i>` to try

    def run(self, example_inputs: list):
        self.module = self._trace_prefix(example_inputs)
        self.graph = self.module.graph
        self.end = next(n for n in self.graph.nodes if n.op == "output")
        template = None
        for j, block in enumerate(self.blocks):
            outside = _outside(block)
            if template is not None and template.fits(self._values(outside)):
                self._stamp(template, block, outside)
                continue
            exported = self._exported(block) if j > 0 else self._exported_by_any(block)
            traced, recipes = self._trace_segment(block, outside, exported)
            if j == 0:
                template = _Template(traced, recipes, self._values(outside), [block.index(n) for n in exported])
        if self.suffix:
            self._trace_segment(self.suffix, _outside(self.suffix), self._exported(self.suffix))
        self._finish()
        return self.module, self.count

    # -- the segments --------------------------------------------------------

    def _trace_prefix(self, example_inputs: list) -> torch.fx.GraphModule:
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        exported = self._exported(self.prefix)
        sub = _Segment(placeholders + self.prefix, [], exported)
        traced = _trace(sub, example_inputs, self.decompositions)
        traced_placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
        self.env.update(zip(placeholders, traced_placeholders))
        self.env.update(zip(exported, _output_nodes(traced)))
        self.count.traced_nodes += sum(1 for n in traced.graph.nodes if n.op == "call_function")
        return traced

    def _trace_segment(self, nodes, outside, exported) -> tuple[torch.fx.GraphModule, dict]:
        """The segment traced and appended. make_fx makes its own fake inputs, so the values its trace
        gives views of them are rebuilt on the storages of the values they view here (`_recipes`)."""
        sub = _Segment(nodes, outside, exported)
        if not _plain(self._values(outside)):
            raise _Refused("a fake input carrying data")
        traced = _trace(sub, self._values(outside), self.decompositions)
        recipes = _recipes(traced)
        mapped = self._append(traced, [self.env[n] for n in outside], recipes, stamped=False)
        self.env.update(zip(exported, mapped))
        return traced, recipes

    def _stamp(self, template: "_Template", block, outside) -> None:
        mapped = self._append(template.traced, [self.env[n] for n in outside], template.recipes, stamped=True)
        by_position = dict(zip(template.exported_positions, mapped))
        for node in self._exported(block):
            position = block.index(node)
            if position not in by_position:
                raise _Refused("a value of a later block that block 1 does not export")
            self.env[node] = by_position[position]
        self.count.stamped_blocks += 1

    def _append(self, traced: torch.fx.GraphModule, inputs: list, recipes: dict, stamped: bool) -> list:
        """`traced`'s nodes appended before the output, placeholders read as `inputs`, each given a value
        of its own by its recipe (`_recipes`); its outputs."""
        new_values: dict = {}   # node of `traced` -> its value here
        input_values = [n.meta["val"] for n in inputs]
        local: dict[torch.fx.Node, object] = dict(zip((n for n in traced.graph.nodes if n.op == "placeholder"),
                                                      inputs))
        with self.graph.inserting_before(self.end):
            for node in traced.graph.nodes:
                if node.op == "placeholder":
                    continue
                if node.op == "output":
                    return [local[n] if isinstance(n, torch.fx.Node) else n for n in node.args[0]]
                if node.op == "get_attr":
                    local[node] = self._constant(traced, node, stamped)
                    new_values[node] = local[node].meta["val"]
                    continue
                args = torch.fx.node.map_arg(node.args, local.__getitem__)
                kwargs = torch.fx.node.map_arg(node.kwargs, local.__getitem__)
                new = self.graph.create_node(node.op, node.target, args, kwargs, name=self._name(node.target))
                new.meta = _stamped_meta(node, args, kwargs, recipes[node], new_values, input_values)
                local[node] = new
                if stamped:
                    self.count.stamped_nodes += 1
                else:
                    self.count.traced_nodes += 1
        raise AssertionError("a traced graph ends with its output")

    def _constant(self, traced: torch.fx.GraphModule, node: torch.fx.Node, stamp: bool) -> torch.fx.Node:
        """A tensor constant a segment's trace lifted (`_tensor_constant0`), under the name make_fx gives
        it in the whole graph: the first free `_tensor_constant<i>`. A stamped block gets a copy of its
        own, as tracing it would have lifted one, with a fake value of its own."""
        tensor = getattr(traced, node.target)
        if stamp:
            tensor = tensor.clone()
        while hasattr(self.module, f"_tensor_constant{self.constants}"):
            self.constants += 1
        name = f"_tensor_constant{self.constants}"
        setattr(self.module, name, tensor)
        new = self.graph.create_node("get_attr", name)
        new.meta = dict(node.meta)
        if stamp:
            original = node.meta["val"]
            new.meta["val"] = original.fake_mode.from_tensor(tensor, static_shapes=True)
            if not _same_metadata(new.meta["val"], original):
                raise _Refused("a stamped constant differs from block 1's")
            self.count.stamped_nodes += 1
        else:
            self.count.traced_nodes += 1
        return new

    def _name(self, target) -> str | None:
        """The name make_fx gives a node of `target` in the whole graph (its operator's, numbered)."""
        if isinstance(target, torch._ops.OpOverload):
            return self.graph._target_to_str(target.overloadpacket.__name__)
        return None

    def _finish(self) -> None:
        values = self.output.args[0]
        flat = list(values) if isinstance(values, (tuple, list)) else [values]
        if not all(isinstance(v, torch.fx.Node) for v in flat):
            raise _Refused("an output that is not a graph value")
        self.end.args = (tuple(self.env[v] for v in flat),)
        prefix_end = [n for n in self.graph.nodes if n.op == "output"]
        assert prefix_end == [self.end]
        self.graph.lint()
        self.module = torch.fx.GraphModule(self.module, self.graph)  # with its code, as make_fx gives it

    # -- values crossing the cuts --------------------------------------------

    def _values(self, nodes) -> list:
        return [self.env[n].meta["val"] for n in nodes]

    def _exported(self, nodes) -> list:
        """Nodes of a segment read after it (by a later node or the output), in graph order."""
        inside = set(nodes)
        return [n for n in nodes if any(u not in inside for u in n.users)]

    def _exported_by_any(self, block) -> list:
        """Block 1's nodes at every position that some block exports: what the stamped copies need."""
        positions = set()
        for other in self.blocks:
            exported = set(self._exported(other))
            positions.update(i for i, n in enumerate(other) if n in exported)
        return [block[i] for i in sorted(positions)]


def _outside(nodes) -> list:
    """Values a segment reads from before it, by first use."""
    inside, seen = set(nodes), {}
    for node in nodes:
        for value in node.all_input_nodes:
            if value not in inside:
                seen.setdefault(value, None)
    return list(seen)


def _output_nodes(traced: torch.fx.GraphModule) -> list:
    return list(next(n for n in traced.graph.nodes if n.op == "output").args[0])


class _Segment:
    """Runs `nodes` of a captured graph on `outside` values (then on the placeholders among `nodes`),
    returning `exported` as a tuple: the calls the graph's generated code makes, without generating
    code for each segment."""

    def __init__(self, nodes, outside, exported):
        self.nodes, self.outside, self.exported = nodes, outside, exported

    def __call__(self, *args):
        env = dict(zip(self.outside, args))
        rest = iter(args[len(self.outside):])
        for node in self.nodes:
            if node.op == "placeholder":
                env[node] = next(rest)
                continue
            node_args, node_kwargs = torch.fx.node.map_arg((node.args, node.kwargs), env.__getitem__)
            if node.op == "call_function":
                env[node] = node.target(*node_args, **node_kwargs)
            elif node.op == "call_method":
                env[node] = getattr(node_args[0], node.target)(*node_args[1:], **node_kwargs)
            else:
                raise _Refused(f"a {node.op} node")
        return tuple(env[n] for n in self.exported)


class _Template:
    """Block 1's trace, stamped for later blocks whose outside values have the same metadata and
    share storage among themselves as block 1's do."""

    def __init__(self, traced: torch.fx.GraphModule, recipes: dict, inputs: list, exported_positions: list[int]):
        self.traced, self.recipes, self.exported_positions = traced, recipes, exported_positions
        self.inputs = [metadata(v) for v in inputs]
        if any(m is None for m in self.inputs) or not _plain(inputs):
            raise _Refused("a block reads a value that is not a plain tensor, or a constant")
        self.sharing = _sharing(inputs)

    def fits(self, values: list) -> bool:
        return [metadata(v) for v in values] == self.inputs and _plain(values) and _sharing(values) == self.sharing


def _plain(values: list) -> bool:
    """No fake value that carries its data (a constant the fake mode may fold ops on)."""
    return all(getattr(v, "constant", None) is None for v in values)


def _sharing(values: list) -> tuple[int, ...]:
    """For each value, the first value with its storage: which inputs alias which."""
    first: dict[int, int] = {}
    return tuple(first.setdefault(v.untyped_storage()._cdata, i) for i, v in enumerate(values))


# How a stamped node gets its value, from block 1's node of the same position (`_recipes`):
#   ("fresh",)            a tensor of its own storage, block 1's metadata;
#   ("alias", owner)      block 1's metadata on the storage of `owner`'s stamped value, where `owner` is
#                         the first value of block 1 (an input by position, or a node, and an element
#                         index for a tuple) holding that storage;
#   ("item", index)       element `index` of the stamped parent's value (operator.getitem);
#   ("items", recipes)    a tuple or list, element by element;
#   ("run",)              its op run on its arguments' fake values (a constant, a value requiring grad,
#                         anything else).
# The metadata of an op's result, and which argument's storage it shares, are functions of its
# arguments' metadata, their sharing and its constants, which the stamped block has as block 1 had.


def _recipes(traced: torch.fx.GraphModule) -> dict:
    owners: dict[int, tuple] = {}
    placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
    for i, node in enumerate(placeholders):
        owners.setdefault(node.meta["val"].untyped_storage()._cdata, ("input", i))
    recipes = {}
    for node in traced.graph.nodes:
        if node.op == "call_function":
            recipes[node] = _recipe(node, node.meta.get("val"), owners, (node, None))
        elif node.op == "get_attr" and isinstance(node.meta.get("val"), torch.Tensor):
            owners.setdefault(node.meta["val"].untyped_storage()._cdata, (node, None))
    return recipes


def _recipe(node: torch.fx.Node, value, owners: dict, place: tuple) -> tuple:
    if node.target is operator.getitem and place[1] is None:
        parent = node.args[0].meta.get("val")
        if isinstance(parent, (tuple, list)) and parent[node.args[1]] is value:
            return ("item", node.args[1])
    if isinstance(value, (tuple, list)) and place[1] is None:
        return ("items", type(value), tuple(_recipe(node, v, owners, (node, i)) for i, v in enumerate(value)))
    if not isinstance(value, torch.Tensor):
        return ("run",)
    storage = value.untyped_storage()
    owner = owners.setdefault(storage._cdata, place)  # a value run, too, owns the storage it makes
    if type(value) is not FakeTensor or value.constant is not None or value.requires_grad \
            or metadata(value) is None:
        return ("run",)
    if owner == place:
        return ("fresh", storage.nbytes())
    return ("alias", owner)


def _stamped_value(recipe: tuple, original, new_values: dict, inputs: list):
    """The stamped node's value by `recipe` (see above); None where it must run its op."""
    kind = recipe[0]
    if kind == "run":
        return None
    if kind == "items":
        made = [_stamped_value(r, o, new_values, inputs) for r, o in zip(recipe[2], original)]
        return None if any(v is None for v in made) else recipe[1](made)
    if kind == "fresh":
        storage = torch.UntypedStorage(recipe[1], device="meta")
    else:
        where, index = recipe[1]
        owner = inputs[index] if where == "input" else new_values[where]
        if index is not None and where != "input":
            owner = owner[index]
        storage = owner.untyped_storage()
    meta = torch.empty((0,), dtype=original.dtype, device="meta").set_(
        storage, original.storage_offset(), original.shape, original.stride())
    return FakeTensor(original.fake_mode, meta, original.device)


def _stamped_meta(node: torch.fx.Node, args, kwargs, recipe: tuple, new_values: dict, inputs: list) -> dict:
    """A copied node's meta with a value of its own (`_recipes`), checked against block 1's."""
    original = node.meta.get("val")
    if recipe[0] == "item":
        value = new_values[node.args[0]][recipe[1]]
    else:
        value = _stamped_value(recipe, original, new_values, inputs)
    if value is None:
        values = torch.fx.node.map_arg((args, kwargs), lambda n: n.meta["val"])
        with _fake_mode(original):
            value = node.target(*values[0], **values[1])
    if not _same_metadata(value, original):
        raise _Refused(f"stamped {node.target} differs from block 1's")
    new_values[node] = value
    meta = {"val": value}
    if "tensor_meta" in node.meta:  # a named tuple of the metadata checked equal just above
        meta["tensor_meta"] = node.meta["tensor_meta"]
    return meta


def _fake_mode(value):
    values = value if isinstance(value, (tuple, list)) else (value,)
    for v in values:
        mode = getattr(v, "fake_mode", None)
        if mode is not None:
            return mode
    raise _Refused("a stamped node without a fake value")


def _same_metadata(a, b) -> bool:
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        return isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and len(a) == len(b) \
            and all(_same_metadata(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return metadata(a) == metadata(b) and metadata(a) is not None
    return type(a) is type(b) and a == b
