"""transformers' KV caches as the reference decode engine and the scorer use them.

``call_with_cache`` is the one model call with a cache (the keyword's name changed in transformers
5.2x). ``rewind_cache`` is the one place that shortens a transformers KV cache: it works on
transformers 5.17 and 5.2x, where ``DynamicCache.crop`` only takes a non-positive number of tokens to
remove. The lanes and the scoring read stored caches through ``cache_tensors`` (the one place that
reads a cache's per-layer keys and values) and two kinds of borrowed layer, so that no path ever
holds a second copy of a whole batch's cache: ``prefix_cache`` serves a call after rows of stored
prompts (one prompt: an expanded view), assembling each layer's rows only while that layer runs and
keeping nothing (``nlls.nlls_after_prompts``); ``LaneCache`` holds many searches in preallocated
buffers that each call writes in place. The layers need full attention (no sliding window), as in
every model the kit makes.

Knows nothing of answers, tasks or searches; torch and transformers are imported on first use.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence


def rewind_cache(cache, length: int) -> None:
    """Shorten a KV cache to its first ``length`` positions, in place (never grows it)."""
    current = cache.get_seq_length()
    if length > current:
        raise ValueError(f"cannot rewind a cache of {current} positions to {length}")
    if length < current:
        cache.crop(length - current)  # a negative count: 'remove this many', in every version


@functools.cache
def _cache_keyword(model_class) -> str:
    import inspect

    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def call_with_cache(model, cache, **inputs):
    """``(output, cache)`` of ``model(**inputs)`` reading and extending ``cache``, on every transformers the
    kit runs on: 5.2x renamed the keyword and the output's field ``past_key_values`` to ``cache`` (the old
    name warns until 5.40 drops it). A peft model is asked about the model it wraps, which takes the keyword."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    keyword = _cache_keyword(type(base))
    output = model(**inputs, **{keyword: cache}, use_cache=True)
    return output, getattr(output, keyword)


def new_cache(model):
    """An empty dynamic KV cache for ``model``."""
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:  # older signatures take no config
        return DynamicCache()


def cache_tensors(cache) -> list[tuple]:
    """The (keys, values) of every layer, each (batch, heads, length, head dim); transformers >= 4.56."""
    return [(layer.keys, layer.values) for layer in cache.layers]


@functools.cache
def _layer_classes():
    """The two cache layers of the batched paths (made on first use: ``import arc_kit`` loads no torch).

    Both read keys and values they do not own, so a model call over some rows of a stored cache
    never copies the whole of it: ``PrefixLayer`` puts a prompt's rows (an expanded view when every
    row reads one prompt) before the call's tokens, one layer at a time, and keeps nothing the call
    brings; ``BufferLayer`` writes the call's tokens in place into preallocated buffers and returns views.
    """
    import torch
    from transformers.cache_utils import DynamicLayer

    class PrefixLayer(DynamicLayer):
        def __init__(self, keys, values, rows):
            super().__init__()
            self.keys, self.values, self.rows = keys, values, rows  # rows: an int (one row, expanded) or a tensor
            self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True

        def _prefix(self, tensor, count: int):
            if isinstance(self.rows, int):
                return tensor[self.rows:self.rows + 1].expand(count, -1, -1, -1)  # a view: no copy
            return tensor.index_select(0, self.rows)  # this layer's rows only, freed after its attention

        def update(self, key_states, value_states, *args, **kwargs):
            count = key_states.shape[0]
            return (torch.cat([self._prefix(self.keys, count), key_states], dim=-2),
                    torch.cat([self._prefix(self.values, count), value_states], dim=-2))

    class BufferLayer(DynamicLayer):
        def __init__(self, keys, values, rows: slice, length: int):
            super().__init__()
            self.buffers, self.rows, self.length = (keys, values), rows, length
            self.keys, self.values = keys[rows, :, :length], values[rows, :, :length]
            self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True

        def update(self, key_states, value_states, *args, **kwargs):
            end = self.length + key_states.shape[-2]
            keys, values = self.buffers
            keys[self.rows, :, self.length:end] = key_states
            values[self.rows, :, self.length:end] = value_states
            return keys[self.rows, :, :end], values[self.rows, :, :end]

    return DynamicLayer, PrefixLayer, BufferLayer


def _cache_of(model, layers):
    """A dynamic cache for ``model`` made of the given layers."""
    cache = new_cache(model)
    cache.layers = list(layers)
    return cache


def full_attention_tensors(cache) -> list[tuple]:
    """``cache_tensors`` of a cache whose every layer attends to every position (what the batched paths handle)."""
    plain = _layer_classes()[0]
    for layer in cache.layers:
        if type(layer) is not plain:
            raise ValueError(f"batched search and scoring need full-attention cache layers, not {type(layer).__name__}")
    return cache_tensors(cache)


def prefix_cache(model, tensors, rows):
    """A cache for one model call after stored prompts: row i of the call reads prompt row ``rows[i]``.

    ``tensors``: a prompt cache's ``cache_tensors``; ``rows``: an int (every row reads that prompt:
    an expanded view, no copy) or a 1-D long tensor. The call's own tokens are not kept: the cache
    serves one call. Each layer's prompt rows are assembled only while that layer runs.
    """
    prefix_layer = _layer_classes()[1]
    return _cache_of(model, [prefix_layer(keys, values, rows) for keys, values in tensors])


class LaneCache:
    """Key and value buffers for many searches in one batch, written in place: one row per search.

    Row r holds its prompt in columns [0, its length), then what its search fed. All rows share
    ``length`` (the columns in use); which columns a row may attend to is its caller's business (an
    attention mask). The buffers are allocated once, by the first ``put`` (zeros: columns that are
    never written, masked out, must still hold finite numbers), so stacking the prompts costs the
    batch and one prompt's cache, never the batch twice; a model call through ``view`` writes its
    tokens into the next free columns and reads views (no copy of the cache per step). ``keep_rows``,
    ``move_columns`` and ``grow`` rearrange in place, one layer at a time.
    """

    def __init__(self, rows: int, capacity: int):
        self.rows, self.capacity, self.length = rows, capacity, 0
        self.buffers: list[tuple] | None = None  # per layer (keys, values), each (rows, heads, capacity, head dim)

    def put(self, row: int, cache) -> None:
        """Copy a one-row cache into ``row`` from column 0 (``length`` becomes at least its length)."""
        import torch

        tensors = full_attention_tensors(cache)
        if self.buffers is None:
            self.buffers = [tuple(torch.zeros((self.rows, part.shape[1], self.capacity, part.shape[3]),
                                              dtype=part.dtype, device=part.device) for part in pair)
                            for pair in tensors]
        count = tensors[0][0].shape[2]
        if count > self.capacity:
            raise ValueError(f"a cache of {count} positions does not fit {self.capacity} columns")
        for pair, buffers in zip(tensors, self.buffers):
            for part, buffer in zip(pair, buffers):
                buffer[row, :, :count] = part[0]
        self.length = max(self.length, count)

    def view(self, model, rows: slice):
        """A cache for one model call of ``rows`` (a slice) at ``length``; its tokens land in the next columns.

        ``length`` is left as it was: the caller advances it once every row has had its call.
        """
        if self.buffers is None:
            raise ValueError("nothing was put in the lane cache")
        buffer_layer = _layer_classes()[2]
        return _cache_of(model, [buffer_layer(keys, values, rows, self.length) for keys, values in self.buffers])

    def keep_rows(self, rows: Sequence[int]) -> None:
        """Move ``rows`` (increasing) to the front, in order; the other rows' contents are forgotten."""
        import torch

        if list(rows) == list(range(len(rows))):
            return
        device = self.buffers[0][0].device
        index = torch.tensor(list(rows), dtype=torch.long, device=device)
        for buffers in self.buffers:
            for buffer in buffers:
                buffer[:len(rows), :, :self.length] = buffer[index, :, :self.length]  # the right side is a copy

    def move_columns(self, columns, start: int) -> None:
        """Row r (of the first ``len(columns)``) gets its columns ``columns[r]`` at [start, start + n); length too.

        ``columns``: an (rows, n) long tensor of positions below ``start``; ``length`` becomes start + n.
        """
        rows, count = columns.shape
        if count:
            for buffers in self.buffers:
                for buffer in buffers:
                    index = columns.to(buffer.device)[:, None, :, None].expand(-1, buffer.shape[1], -1, buffer.shape[3])
                    buffer[:rows, :, start:start + count] = buffer[:rows].gather(2, index)
        self.length = start + count

    def grow(self, capacity: int, rows: int | None = None) -> None:
        """Room for ``capacity`` columns, keeping the first ``rows`` rows (all by default) and ``length``."""
        import torch

        rows = self.rows if rows is None else rows
        for index, buffers in enumerate(self.buffers):
            grown = []
            for buffer in buffers:
                bigger = torch.zeros((rows, buffer.shape[1], capacity, buffer.shape[3]), dtype=buffer.dtype,
                                     device=buffer.device)
                bigger[:, :, :self.length] = buffer[:rows, :, :self.length]
                grown.append(bigger)
            self.buffers[index] = tuple(grown)  # the old layer is freed here: the peak is one layer more
        self.rows, self.capacity = rows, capacity
