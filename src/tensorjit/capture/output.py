"""The graph being captured and everything that leaves capture with it.

`OutputGraph` owns the `torch.fx.Graph`, the fake-tensor mode used to compute
example values, the graph inputs (each with its `Source` and real example),
the guards and the Python side effects to replay after the graph runs.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode

from .aliasing import WriteWatch
from .breaks import GraphBreak
from .dynamic import ExpressionSource, SizeSource, name_sizes_for_messages, new_shape_env, symbolic_float, symbolic_int
from .guards import Guard, GuardSet, TensorSignature
from .sources import Source
from .values.base import DELETED
from .values.tensors import TensorValue


@dataclass
class GraphInput:
    source: Source
    example: torch.Tensor
    node: torch.fx.Node


@dataclass
class SideEffect:
    """A Python-visible write to replay after the graph: `kind` is attr, delattr, global, item, cell, container, hook, or advance (an input iterator capture took items from)."""

    kind: str
    target: Any  # a Value (the object written to) or a name
    key: Any
    value: Any  # a Value


class OutputGraph:
    def __init__(self, fn_name: str, policy=None, arguments: tuple = ()) -> None:
        self.graph = torch.fx.Graph()
        self.policy = policy
        self.shape_env = new_shape_env() if policy is not None and policy.any_possible(arguments) else None
        self.fake_mode = FakeTensorMode(allow_non_fake_inputs=False, shape_env=self.shape_env)
        self.writes = WriteWatch()  # entered inside fake_mode: which storages the graph's ops write
        self.symbols: dict = {}  # sympy symbol -> placeholder node of that size
        self.inputs: list[GraphInput] = []
        self.inputs_by_id: dict[int, Any] = {}
        self.guards = GuardSet()
        self.side_effects: list[SideEffect] = []
        self.container_writes = 0  # writes to lists, dicts and sets so far (regions.py: a region that writes stays inline)
        self.attribute_overlay: dict[tuple[int, str], Any] = {}
        self.module_table_writes: set[tuple[int, str]] = set()  # overlay keys nn.Module.__setattr__ put in a table
        self.keep_alive: list[Any] = []
        self.fn_name = fn_name
        self._names: dict[str, int] = {}
        self.constants: dict[str, torch.Tensor] = {}
        self.submodules: dict[str, torch.nn.Module] = {}  # functions passed to higher-order ops (torch.cond)
        self.regions: dict[tuple, str] = {}  # nested_compile_region subgraphs by their key (capture/regions.py)
        self.wrapped: dict[Source, tuple] = {}
        self.wrapped_by_id: dict[int, tuple] = {}
        self.wrapping: dict[Source, Any] = {}  # containers whose items are being wrapped (their owner)
        self.code_files: set[str] = set()  # files of the code run while capturing (the warm-start cache checks them)

    def release(self) -> None:
        """After capture (see Capture.release): forget the program's objects read and written."""
        for table in (self.wrapped, self.wrapped_by_id, self.wrapping, self.attribute_overlay, self.inputs_by_id):
            table.clear()
        self.side_effects, self.keep_alive, self.inputs = [], [], []

    # -- nodes -----------------------------------------------------------------
    def unique_name(self, hint: str) -> str:
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in hint) or "t"
        if base[0].isdigit():
            base = "_" + base
        n = self._names.get(base, 0)
        self._names[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    def add_input(self, example: torch.Tensor, source: Source) -> tuple[torch.fx.Node, torch.Tensor]:
        """A graph placeholder for the real tensor `example` read through `source`."""
        context = self.policy.context(source, example) if self.shape_env is not None else None
        if context is not None:
            self.guard(Guard(source, "tensor_dynamic", TensorSignature.of(example)))
        else:
            self.guard(Guard(source, "tensor", TensorSignature.of(example)))
        existing = self.inputs_by_id.get(id(example))
        if existing is not None:
            node, fake, first_source = existing
            self.guard(Guard(source, "same", other=first_source))
            return node, fake
        if context is not None:
            name_sizes_for_messages(self.shape_env, source, example.dim())
            fake = self.fake_mode.from_tensor(example, symbolic_context=context,
                                              source=ExpressionSource(source.expression()))
            self._add_size_inputs(fake, source, example)
        else:
            fake = self.fake_mode.from_tensor(example, static_shapes=True)
        node = self._placeholder(str(source).replace(".", "_").replace("[", "_").replace("]", ""))
        node.meta["example_value"] = fake
        node.meta["source"] = str(source)
        node.meta["symbolic_context"] = context
        self.inputs.append(GraphInput(source, example, node))
        self.inputs_by_id[id(example)] = (node, fake, source)
        self.keep_alive.append(example)
        return node, fake

    def _placeholder(self, hint: str) -> torch.fx.Node:
        name = self.unique_name(hint)
        first = self._first_non_placeholder()
        if first is None:
            return self.graph.placeholder(name)
        with self.graph.inserting_before(first):
            return self.graph.placeholder(name)

    def _add_size_inputs(self, fake: torch.Tensor, source: Source, example: torch.Tensor) -> None:
        """An int placeholder for each new symbol among `fake`'s sizes."""
        for dim, size in enumerate(fake.shape):
            if isinstance(size, torch.SymInt):
                symbol = size.node.expr
                if getattr(symbol, "is_Symbol", False) and symbol not in self.symbols:
                    node = self._placeholder(str(symbol))
                    node.meta["example_value"] = size
                    self.symbols[symbol] = node
                    self.inputs.append(GraphInput(SizeSource(source, dim), int(example.shape[dim]), node))

    def add_int_input(self, value: int | float, source: Source) -> torch.fx.Node:
        """A graph placeholder for an int (or float) argument that is symbolic in this capture."""
        self.guard(Guard(source, "type", type(value)))
        example = (symbolic_float if type(value) is float else symbolic_int)(self.shape_env, value, source)
        node = self._placeholder(str(source))
        node.meta["example_value"] = example
        self.symbols[example.node.expr] = node
        self.inputs.append(GraphInput(source, value, node))
        return node

    def symbolic_inputs(self) -> tuple[list, list, list]:
        """Fake tensors, symbolic ints, their sources and symbolic contexts, for the shape guards."""
        inputs = [gi for gi in self.inputs if isinstance(gi.node.meta["example_value"],
                                                                (torch.Tensor, torch.SymInt, torch.SymFloat))]
        return ([gi.node.meta["example_value"] for gi in inputs], [gi.source for gi in inputs],
                [gi.node.meta.get("symbolic_context") for gi in inputs])

    def _first_non_placeholder(self) -> torch.fx.Node | None:
        for node in self.graph.nodes:
            if node.op != "placeholder":
                return node
        return None

    def create_node(self, op: str, target: Any, args: tuple, kwargs: dict, example: Any) -> torch.fx.Node:
        hint = target if isinstance(target, str) else getattr(target, "__name__", "op")
        node = self.graph.create_node(op, target, args, kwargs, name=self.unique_name(hint))
        node.meta["example_value"] = example
        return node

    def guard(self, guard: Guard) -> None:
        self.guards.add(guard)

    # -- Python-visible writes, replayed after the graph ------------------------------

    def record_mutation(self, container) -> None:
        self.side_effects.append(SideEffect("container", container, None, None))

    def record_attribute_write(self, obj, name: str, value, target_source=None) -> None:
        key = (id(obj.obj) if hasattr(obj, "obj") else id(obj), name)
        self.attribute_overlay[key] = value
        self.side_effects.append(SideEffect("attr", obj, name, value))
        if target_source is not None:
            self.side_effects[-1] = SideEffect("cell", target_source, name, value)

    def record_attribute_delete(self, obj, name: str) -> None:
        """`del obj.name` of an object from outside: later reads in capture raise AttributeError."""
        self.attribute_overlay[(id(obj.obj), name)] = DELETED
        self.side_effects.append(SideEffect("delattr", obj, name, None))

    def record_hook(self, handle) -> None:
        """A tensor hook registered on a tensor from outside (values/hooks.py): registered after the graph."""
        self.side_effects.append(SideEffect("hook", handle, None, None))

    def record_iterator_advance(self, iterator) -> None:
        """An input iterator capture took items from: after the graph it is advanced by as many."""
        self.side_effects.append(SideEffect("advance", iterator, None, None))

    def record_global_write(self, globals_dict, name: str, value, is_root: bool) -> None:
        if not is_root:
            raise GraphBreak("global-write", f"write to global {name!r} of another module")
        self.attribute_overlay[(id(globals_dict), name)] = value
        self.side_effects.append(SideEffect("global", None, name, value))

    def constant_tensor(self, tensor: torch.Tensor):
        existing = self.inputs_by_id.get(id(tensor))
        if existing is not None:
            return TensorValue(existing[0], existing[1])
        name = self.unique_name("constant")
        self.constants[name] = tensor
        node = self.graph.get_attr(name)
        fake = self.fake_mode.from_tensor(tensor, static_shapes=True)
        node.meta["example_value"] = fake
        self.inputs_by_id[id(tensor)] = (node, fake, None)
        self.keep_alive.append(tensor)
        return TensorValue(node, fake)

    def add_submodule(self, module: torch.nn.Module, hint: str) -> torch.fx.Node:
        """A get_attr node for `module`, kept on the graph module (torch.fx prints no function objects)."""
        name = self.unique_name(hint)
        self.submodules[name] = module
        node = self.graph.get_attr(name)
        node.meta["example_value"] = module
        return node

    # -- finishing ---------------------------------------------------------------
    def build_module(self, outputs: list[torch.fx.Node]) -> torch.fx.GraphModule:
        self.graph.output(tuple(outputs))
        root = torch.nn.Module()
        for name, tensor in self.constants.items():
            root.register_buffer(name, tensor)
        for name, module in self.submodules.items():
            root.add_module(name, module)
        # Dead nodes removed before the module generates its code, which it does when made: the
        # graph's code is then generated and compiled once. Run again on the module's graph, the
        # pass finds nothing more there, and does what it does only for an owning module: the
        # same in the subgraphs it holds, whose changes need the code generated again.
        self.graph.eliminate_dead_code(is_impure_node=_is_impure)
        gm = torch.fx.GraphModule(root, self.graph, class_name="GraphModule")
        if gm.graph.eliminate_dead_code(is_impure_node=_is_impure):
            gm.recompile()
        return gm

    def op_count(self) -> int:
        """Operations in the graph; grad-mode switches alone make no graph worth running (the restore
        code sets the grad mode the graph would have left, as Dynamo keeps it as global state)."""
        return sum(1 for n in self.graph.nodes if n.op in ("call_function", "call_method", "call_module")
                   and n.target is not torch._C._set_grad_enabled)


_IMPURE_FUNCTIONS = {torch._C._set_grad_enabled, torch.amp.autocast_mode._enter_autocast,
                     torch.amp.autocast_mode._exit_autocast, torch.autograd.grad_mode._enter_inference_mode,
                     torch.autograd.grad_mode._exit_inference_mode, operator.setitem,
                     operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv,
                     operator.imod, operator.ipow, operator.iand, operator.ior, operator.ixor,
                     operator.ilshift, operator.irshift, operator.imatmul}
# Random ops advance the generator even when their result is unused, as in eager.
_RANDOM_WORDS = ("rand", "dropout", "bernoulli", "normal", "multinomial", "uniform", "exponential")


def _is_impure(node: torch.fx.Node) -> bool:
    if node.op in ("placeholder", "output"):
        return True
    if node.target in _IMPURE_FUNCTIONS or "out" in node.kwargs:
        return True
    if getattr(node.target, "mutates", False):  # a NumPy operation that writes to an array (values/numpy.py)
        return True
    if node.op == "call_method" and isinstance(node.target, str) and node.target.endswith("_") \
            and not node.target.endswith("__"):
        return True
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    if any(word in name for word in _RANDOM_WORDS):
        return True
    if node.op == "call_function":
        if name.endswith("_") and not name.endswith("__"):
            return True
        if any(schema.is_mutable for schema in _schemas(node.target)):
            return True
        if node.target in (operator.setitem,):
            return True
    return False



def _schemas(target) -> list:
    """The schemas an op call may run: an overload's, or every overload of a packet
    (`torch.ops.mylib.fill(x)` resolves its overload when called)."""
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return [schema]
    if isinstance(target, torch._ops.OpOverloadPacket):
        return [getattr(target, name)._schema for name in target.overloads()]
    return []
