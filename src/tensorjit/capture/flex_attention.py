"""torch.nn.attention.flex_attention in compiled code, without the whole score matrix.

Eager flex_attention materializes the (batch, heads, queries, keys) score matrix; users compile
it to avoid that. Capture records a call as one graph node of `blocked_flex_attention`, the
user's `score_mod` and the block mask's `mask_mod` as submodules of the graph module (as cond's
branches), the block mask's block tables as graph inputs. `blocked_flex_attention` walks the
keys in blocks of `KEY_BLOCK` with an online softmax (running maximum and sum, the output
rescaled as each block arrives), so no tensor larger than (batch, heads, queries, KEY_BLOCK)
holds scores. The eager backend runs it as it is; the autograd stage traces it into the ATen
graph (the loop unrolled over the key blocks) and tags it to be recomputed in the backward, as
flash attention's backward recomputes the scores instead of saving them.

`score_mod(score, b, h, q_idx, kv_idx)` and `mask_mod(b, h, q_idx, kv_idx)` are written for
scalars and run under torch.vmap over the four index dimensions, as torch runs them. A block
mask contributes its block tables (blocks outside both the partial and the full tables are
masked whatever mask_mod says; mask_mod applies in partial blocks, as in torch's kernels).

Graph breaks (the call runs eagerly, logged): return_aux, functions that close over tensors of
the frame, a block mask capture does not see as an object with tensor tables.
"""

from __future__ import annotations

import math
import sys
import types
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree

from .breaks import GraphBreak
from .higher_order import RECOMPUTE, _real_function
from .sources import GlobalSource, ModuleGlobalSource
from .values.base import CallableConstant, ConstantValue, Value
from .values.containers import TupleValue
from .values.tensors import TensorValue, _example_of, to_node_argument, wrap_result

KEY_BLOCK = 64
"""Keys per step of the online softmax: the largest score tensor is (batch, heads, queries, KEY_BLOCK)."""

_NAMES = ("query", "key", "value", "score_mod", "block_mask", "scale", "enable_gqa", "return_lse",
          "kernel_options", "return_aux")
_TABLES = ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices")


class ElementwiseFunction(torch.nn.Module):
    """A score_mod or mask_mod as a submodule of the graph module (fx prints no function objects).

    `names`: the globals of tensors it reads (a bias table), which capture passes to the graph as
    inputs (guarded, and traced: a learnable table gets its gradient); `bound(tensors)` is the
    function reading those inputs in their place."""

    def __init__(self, fn: Callable, names: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.fn = fn
        self.names = names

    def bound(self, tensors: tuple) -> Callable:
        if not self.names:
            return self.fn
        fn = self.fn
        scope = {**fn.__globals__, **dict(zip(self.names, tensors))}
        return types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)

    def forward(self, *args):
        return self.fn(*args)


def _global_tensors(fn: Callable | None) -> tuple[str, ...]:
    """Names of the globals holding tensors that `fn`'s own code reads."""
    if fn is None:
        return ()
    return tuple(name for name in fn.__code__.co_names if isinstance(fn.__globals__.get(name), torch.Tensor))


def _over_indices(fn: Callable, with_score: bool) -> Callable:
    """`fn` of scalars, vmapped over (b, h, q_idx, kv_idx) as torch's flex_attention vmaps it."""
    prefix = (0,) if with_score else ()
    for dims in ((None, None, None, 0), (None, None, 0, None), (None, 0, None, None), (0, None, None, None)):
        fn = torch.vmap(fn, in_dims=prefix + dims, out_dims=0)
    return fn


def _block_table(num_blocks: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """(B, H, query blocks, key blocks) booleans from a BlockMask's ordered block table."""
    columns = indices.shape[-1]
    order = torch.arange(columns, device=indices.device)
    valid = order < num_blocks.unsqueeze(-1)  # the first num_blocks entries of each row are blocks
    dense = torch.zeros((*indices.shape[:-1], columns + 1), dtype=torch.int32, device=indices.device)
    target = torch.where(valid, indices.to(torch.int64), torch.full_like(indices, columns, dtype=torch.int64))
    dense = dense.scatter(-1, target, torch.ones_like(target, dtype=torch.int32))
    return dense[..., :columns] != 0


def blocked_flex_attention(query, key, value, score_mod, mask_mod, tables, lifted, block_size, scale: float,
                           enable_gqa: bool, return_lse: bool):
    """flex_attention(query, key, value, ...) by blocks of keys with an online softmax; `lifted` holds
    the tensors score_mod and mask_mod read as globals (ElementwiseFunction.names)."""
    score_mod = score_mod.bound(lifted[0]) if score_mod is not None else None
    mask_mod = mask_mod.bound(lifted[1]) if mask_mod is not None else None
    batch, heads, queries, _ = query.shape
    keys = key.shape[-2]
    if enable_gqa and key.shape[1] != heads:
        key = key.repeat_interleave(heads // key.shape[1], dim=1)
        value = value.repeat_interleave(heads // value.shape[1], dim=1)
    compute = torch.float32 if query.dtype in (torch.float16, torch.bfloat16) else query.dtype
    q = query.to(compute) * scale
    device = query.device
    b = torch.arange(batch, device=device)
    h = torch.arange(heads, device=device)
    q_idx = torch.arange(queries, device=device)
    scored = _over_indices(score_mod, True) if score_mod is not None else None
    masked = _over_indices(mask_mod, False) if mask_mod is not None else None
    partial = full = None
    if tables is not None:
        partial = _block_table(tables[0], tables[1])
        full = _block_table(tables[2], tables[3]) if tables[2] is not None else torch.zeros_like(partial)
    running_max = torch.full((batch, heads, queries), -math.inf, dtype=compute, device=device)
    running_sum = torch.zeros((batch, heads, queries), dtype=compute, device=device)
    out = torch.zeros((batch, heads, queries, value.shape[-1]), dtype=compute, device=device)
    for start in range(0, keys, KEY_BLOCK):
        stop = min(start + KEY_BLOCK, keys)
        kv_idx = torch.arange(start, stop, device=device)
        scores = q @ key[:, :, start:stop].to(compute).transpose(-1, -2)
        if scored is not None:
            scores = scored(scores, b, h, q_idx, kv_idx).to(compute)
        allowed = _allowed(masked, partial, full, block_size, b, h, q_idx, kv_idx, batch, heads)
        if allowed is not None:
            scores = scores.masked_fill(~allowed, -math.inf)
        block_max = torch.maximum(running_max, scores.amax(-1))
        safe_max = torch.where(block_max == -math.inf, torch.zeros_like(block_max), block_max)
        weights = torch.exp(scores - safe_max.unsqueeze(-1))
        correction = torch.exp(running_max - safe_max)
        running_sum = running_sum * correction + weights.sum(-1)
        out = out * correction.unsqueeze(-1) + weights @ value[:, :, start:stop].to(compute)
        running_max = block_max
    empty = running_sum == 0  # every key masked: torch gives zeros and a log-sum-exp of -inf
    result = torch.where(empty.unsqueeze(-1), torch.zeros_like(out), out / running_sum.unsqueeze(-1))
    result = result.to(query.dtype)
    if not return_lse:
        return result
    lse = torch.where(empty, torch.full_like(running_sum, -math.inf),
                      torch.log(torch.where(empty, torch.ones_like(running_sum), running_sum)) + running_max)
    return result, lse.to(torch.float32)


def _allowed(masked, partial, full, block_size, b, h, q_idx, kv_idx, batch, heads):
    """Which (b, h, q, kv) of this key block attend: mask_mod in partial blocks, all of full blocks."""
    element = masked(b, h, q_idx, kv_idx) if masked is not None else None
    if partial is None:
        return element
    q_blocks = torch.div(q_idx, block_size[0], rounding_mode="floor")
    kv_blocks = torch.div(kv_idx, block_size[1], rounding_mode="floor")
    rows = partial[:, :, q_blocks][..., kv_blocks].expand(batch, heads, -1, -1)
    whole = full[:, :, q_blocks][..., kv_blocks].expand(batch, heads, -1, -1)
    return whole | (rows & element) if element is not None else whole | rows


class FlexAttentionValue(CallableConstant):
    def call(self, tx, args, kwargs) -> Value:
        bound = dict(zip(_NAMES, args))
        bound.update(kwargs)
        option = lambda name, default: _constant(bound.get(name), default)
        if option("return_aux", None) is not None:
            raise GraphBreak("flex-attention", "flex_attention with return_aux", "the call runs eagerly")
        query, key, value = (bound[name] for name in ("query", "key", "value"))
        if not all(isinstance(t, TensorValue) for t in (query, key, value)) or query.example.dim() != 4:
            raise GraphBreak("flex-attention", "flex_attention of other than 4-d tensors", "the call runs eagerly")
        score_mod = _function(tx, bound.get("score_mod"), _real_function)
        tables, block_size, mask_mod = _block_mask(tx, bound.get("block_mask"), query, key, _real_function)
        scale = option("scale", None)
        scale = 1.0 / math.sqrt(query.example.shape[-1]) if scale is None else scale
        return _record(tx, (query, key, value), [score_mod, mask_mod], tables,
                       (block_size, scale, bool(option("enable_gqa", False)), bool(option("return_lse", False))))


def _record(tx, tensors: tuple, functions: list, tables: Value, options: tuple) -> Value:
    """The node of `blocked_flex_attention`, tagged to be recomputed in the backward."""
    output = tx.output
    modules = [ElementwiseFunction(fn, _global_tensors(fn)) if fn is not None else None for fn in functions]
    nodes = [output.add_submodule(m, "flex_function") if m is not None else None for m in modules]
    lifted = TupleValue([TupleValue([_global(tx, m.fn, name) for name in m.names] if m is not None else [], tuple)
                         for m in modules], tuple)
    data = [to_node_argument(tx, value) for value in (tables, lifted)]
    node_args = (*(t.node for t in tensors), *nodes, *data, *options)
    fake_args = (*(t.example for t in tensors), *modules, *pytree.tree_map(lambda a: _example_of(tx, a), data),
                 *options)
    try:
        with output.fake_mode:
            result = blocked_flex_attention(*fake_args)
    except GraphBreak:
        raise
    except Exception as error:
        raise GraphBreak("flex-attention", f"flex_attention cannot run on fake tensors: {type(error).__name__}: "
                         f"{error}", "the call runs eagerly") from None
    node = output.create_node("call_function", blocked_flex_attention, node_args, {}, result)
    node.meta[RECOMPUTE] = True
    return wrap_result(tx, node, result, [])


def _global(tx, fn: Callable, name: str) -> Value:
    """The tensor global `name` of `fn`, read by capture (a guarded graph input)."""
    if fn.__globals__ is tx.capture.root_globals:
        source = GlobalSource(name)
    else:
        module = fn.__globals__.get("__name__")
        if module is None or getattr(sys.modules.get(module), "__dict__", None) is not fn.__globals__:
            raise GraphBreak("flex-attention", f"a score_mod or mask_mod reads tensor {name!r} of a module capture "
                             "cannot name", "the call runs eagerly")
        source = ModuleGlobalSource(module, name)
    return tx.wrap(fn.__globals__[name], source)


def _constant(value: Value | None, default: Any) -> Any:
    if value is None:
        return default
    if not value.is_constant():
        raise GraphBreak("flex-attention", f"a flex_attention option is not a constant: {value!r}",
                         "the call runs eagerly")
    return value.constant()


def _function(tx, value: Value | None, real_function: Callable) -> Callable | None:
    if value is None or value.is_constant() and value.constant() is None:
        return None
    try:
        return real_function(tx, value)
    except GraphBreak as error:
        raise GraphBreak("flex-attention", f"a flex_attention score_mod or mask_mod: {error.reason.explanation}",
                         "the call runs eagerly") from None


def _block_mask(tx, mask: Value | None, query, key, real_function) -> tuple:
    """(tables value, block size, mask_mod) of a block mask argument, or (None value, None, None)."""
    if mask is None or mask.is_constant() and mask.constant() is None:
        return ConstantValue(None), None, None
    try:
        lengths = tx.getattr(mask, "seq_lengths").constant()
        block_size = tuple(tx.getattr(mask, "BLOCK_SIZE").constant())
        tables = [tx.getattr(mask, name) for name in _TABLES]
        mask_mod = real_function(tx, tx.getattr(mask, "mask_mod"))
    except GraphBreak as error:
        raise GraphBreak("flex-attention", f"a flex_attention block mask capture cannot read: "
                         f"{error.reason.explanation}", "the call runs eagerly") from None
    if tuple(lengths) != (query.example.shape[-2], key.example.shape[-2]):
        raise GraphBreak("flex-attention", f"a block mask made for lengths {tuple(lengths)}",
                         "the call runs eagerly (and raises as flex_attention does)")
    return TupleValue(tables, tuple), block_size, mask_mod


def flex_attention_value(obj: Any, source) -> Value | None:
    module = sys.modules.get("torch.nn.attention.flex_attention")
    if module is not None and obj is getattr(module, "flex_attention", None):
        return FlexAttentionValue(obj, source)
    return None
