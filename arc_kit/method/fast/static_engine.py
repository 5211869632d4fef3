"""The fast decode engine: merged weights, a static KV cache per lane bucket, fixed-shape steps.

The model's weights are read once into ``decode_weights.DecodeWeights`` (LoRA merged, projections
fused; over bitsandbytes 4-bit weights, the packed weights read in place with the LoRA beside them)
and re-read in place by ``refresh``. A search's lanes live in a static cache allocated once
per (lane bucket, capacity bucket) and kept in a pool for the next search: lane buckets are powers
of two (16, 8, 4, 2, 1 for the solver's searches); capacities are rounded up to 256, 512 or 1024,
then to a multiple of 1024 (attention reads the whole capacity when compiled: a short prompt gets a
small cache). Layout (layers, 2, lanes, kv heads, capacity, head dim): the model's grouped-query
layout, a lane's positions contiguous, so rewinding a DFS branch is only feeding the next token at
an earlier position; nothing is copied, concatenated or gathered per token.

The live lanes always hold the first rows of the cache: when lanes finish, the rows of live lanes
beyond the new count move into the rows freed below it (one gather and scatter of just those rows
per compaction, never per token), and once they fit the next smaller lane bucket, into that
bucket's own cache (one copy). A step computes eagerly exactly the live lanes' rows; compiled, its
bucket's whole cache (the rows past the live ones feed token 0 at position 0 of their own row:
computed, never read). When a position passes the capacity, the cache moves into the next capacity
bucket (one copy). Each step makes one small device-to-host copy, the (rows, run, vocab) NLLs.

A step feeds each live lane a run of tokens at consecutive positions (``step_runs``: a DFS branch's
token and its draft; ``step`` is the run of one token) and returns an NLL row per token. Runs
shorter than the step's longest are padded with token 0 at the positions after them: written to
the lane's cache past its path, never read before a later step writes them again. Compiled, runs
are padded to a power of two (``run_bucket``); eagerly, to the step's longest run.

Eagerly, attention reads only the columns some row can see. Compiled (``compile=True``, the default
on a GPU), the step is ``torch.compile(fullgraph=True)``, one graph per lane bucket and run
bucket with the capacity a dynamic dimension, on CUDA with CUDA graphs (``mode="reduce-overhead"``, recorded per
shape; cache and weight tensors at fixed addresses, outputs copied out before the next step); if
compiling fails (a GPU the compiler does not support, say), the engine logs one line and goes on
eagerly. Prompts (a lane's prompt and guess, the scorer's prompts and answers) run eagerly through
``static_forward.forward_tokens``, straight into the cache rows. Every pass (a prefill, a step, a
scoring pass) ticks ``progress``, as the reference engine's model does through its forward hook, so
a worker's heartbeat shows the search moving.

Knows lanes, buckets and the cache; knows nothing of the searches' bookkeeping, tasks or grids.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from arc_kit import progress
from arc_kit.method.answers import AnswerSpace, answer_log_probs, answer_targets, summed_nlls
from arc_kit.method.engine import BatchLimit, DecodeEngine, out_of_memory_errors
from arc_kit.method.fast.decode_weights import DecodeWeights
from arc_kit.method.fast.static_forward import decode_step, forward_tokens, half_swap, logits, rope_tables

logger = logging.getLogger(__name__)

POOL_BYTES = 4 * 2**30  # caches kept for later searches, least recently used dropped first beyond this


def lane_bucket(lanes: int) -> int:
    """The rows of the cache that holds ``lanes`` lanes: the next power of two."""
    return 1 << max(0, int(lanes) - 1).bit_length()


def run_bucket(length: int) -> int:
    """The run length a compiled step feeds each row for runs of up to ``length`` tokens: the next power of two."""
    return lane_bucket(length)


def capacity_bucket(positions: int) -> int:
    """The capacity of a cache for ``positions`` positions: 256, 512 or 1024, else the next multiple of 1024."""
    for small in (256, 512, 1024):
        if positions <= small:
            return small
    return -(-positions // 1024) * 1024


@dataclass
class _Lanes:
    """The search under way: its cache, and the cache row of each live lane (always the rows 0..live-1)."""

    cache: object  # (layers, 2, bucket of the lanes started, kv heads, capacity, head dim)
    rows: list[int]
    space: AnswerSpace
    allowed: object  # the answer mask over the vocabulary, on the device

    @property
    def bucket(self) -> int:
        """The rows a compiled step computes: the smallest lane bucket that holds the live lanes."""
        return lane_bucket(len(self.rows))

    @property
    def capacity(self) -> int:
        return self.cache.shape[4]


@dataclass
class _Prompts:
    cache: object  # (layers, 2, prompts, kv heads, width, head dim)
    lengths: object  # (prompts,) long, on the device
    first: object  # (prompts, vocab) log-probabilities of each prompt's first answer token


class StaticEngine(DecodeEngine):
    """``DecodeEngine`` on the decoder re-implemented over merged weights (module docstring)."""

    kind = "fast"

    def __init__(self, model, *, compile: bool = False, pool_bytes: int = POOL_BYTES):
        self.model = model
        self.weights = DecodeWeights(model)
        self.device, self.dtype = self.weights.device, self.weights.dtype
        self.compiled = compile
        self.pool_bytes = pool_bytes
        self._pool: OrderedDict = OrderedDict()  # (bucket, capacity) -> cache, most recently used last
        self._rope: dict[int, tuple] = {}  # capacity -> (cos, sin)
        self._swap = half_swap(self.weights.head_dim, self.dtype, self.device)
        self._lanes: _Lanes | None = None
        self._step = self._compiled_step() if compile else decode_step
        for tensor in [*self.weights.tensors(), self._swap]:
            self._fixed(tensor)

    @property
    def vocab_size(self) -> int:
        return self.weights.vocab_size

    def refresh(self) -> None:
        self.weights.refresh()

    def _compiled_step(self):
        """``decode_step`` under ``torch.compile(fullgraph=True)``: CUDA graphs on a GPU.

        The capacity is a dynamic dimension (``_fixed``): one graph per lane bucket and run bucket
        serves every capacity (CUDA graphs are still recorded per shape, which is cheap), instead of a compilation
        per (bucket, capacity).
        """
        import torch

        config = torch._dynamo.config  # a graph per lane and run bucket, more than the default limit allows
        limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"  # older torch
        setattr(config, limit, max(getattr(config, limit), 64))
        if self.device.type == "cuda":
            return torch.compile(decode_step, mode="reduce-overhead", fullgraph=True)
        return torch.compile(decode_step, fullgraph=True)

    def _fixed(self, tensor, capacity_dimension: int | None = None):
        """``tensor`` readied for the compiled step: its address static under CUDA graphs, its capacity dynamic.

        Every tensor the step reads is made here (weights, the rope tables and their swap, caches);
        the step's other inputs (tokens, positions, the search's answer mask) are a few hundred bytes
        that a CUDA graph copies in at each replay.
        """
        import torch

        if self.compiled and self.device.type == "cuda":
            torch._dynamo.mark_static_address(tensor)
        if self.compiled and capacity_dimension is not None:
            torch._dynamo.mark_dynamic(tensor, capacity_dimension)
        return tensor

    # -- buffers -------------------------------------------------------------------------------
    def _cache(self, bucket: int, capacity: int):
        """The pool's cache for (bucket, capacity), allocated (zeros: masked columns stay finite) on first use."""
        import torch

        key = (bucket, capacity)
        if key in self._pool:
            self._pool.move_to_end(key)
            return self._pool[key]
        weights = self.weights
        shape = (len(weights.layers), 2, bucket, weights.kv_heads, capacity, weights.head_dim)
        self._trim_pool(int(np.prod(shape)) * torch.finfo(self.dtype).bits // 8)
        cache = self._fixed(torch.zeros(shape, dtype=self.dtype, device=self.device), capacity_dimension=4)
        self._pool[key] = cache
        return cache

    def _trim_pool(self, needed: int) -> None:
        """Drop the least recently used caches (never the current search's) until ``needed`` more bytes fit."""
        held = self._lanes.cache if self._lanes is not None else None
        for key in list(self._pool):
            total = sum(cache.numel() * cache.element_size() for cache in self._pool.values())
            if total + needed <= self.pool_bytes:
                break
            if self._pool[key] is not held:
                del self._pool[key]

    def _rope_tables(self, capacity: int):
        """The model's rope (cos, sin) at positions 0..capacity-1, made once per capacity."""
        if capacity not in self._rope:
            self._rope[capacity] = tuple(self._fixed(table, capacity_dimension=0)
                                         for table in rope_tables(self.weights, capacity))
        return self._rope[capacity]

    # -- lanes ---------------------------------------------------------------------------------
    def start(self, lanes: int, capacity: int, space: AnswerSpace, limit: BatchLimit | None = None) -> None:
        allowed = space.mask(self.vocab_size, self.device)
        self._lanes = _Lanes(self._cache(lane_bucket(lanes), capacity_bucket(capacity)), list(range(lanes)), space,
                             allowed)

    def _nlls(self, logit_rows) -> np.ndarray:
        lanes = self._lanes
        nlls = -answer_log_probs(logit_rows, lanes.allowed, lanes.space.probabilities)
        return nlls.cpu().numpy().astype(np.float64)

    def _grow(self, positions: int) -> None:
        """Move the search's live rows into a cache of the capacity bucket of ``positions`` (one copy)."""
        lanes, live = self._lanes, len(self._lanes.rows)
        bigger = self._cache(lanes.bucket, capacity_bucket(positions))
        bigger[:, :, :live, :, :lanes.capacity].copy_(lanes.cache[:, :, :live])
        lanes.cache = bigger

    def prefill(self, lane: int, ids: Sequence[int], logits_from: int) -> np.ndarray:
        import torch

        lanes = self._lanes
        if len(ids) > lanes.capacity:
            self._grow(len(ids))
        row, count, cache = lanes.rows[lane], len(ids), lanes.cache
        cos, sin = self._rope_tables(lanes.capacity)

        def store(layer: int, keys, values) -> None:
            cache[layer, 0, row, :, :count] = keys[0]
            cache[layer, 1, row, :, :count] = values[0]

        tensor = torch.tensor([[int(t) for t in ids]], dtype=torch.long, device=self.device)
        progress.tick()
        with torch.no_grad():
            hidden = forward_tokens(self.weights, tensor, torch.arange(count, device=self.device)[None], cos, sin,
                                    store=store)
            return self._nlls(logits(self.weights, hidden[0, logits_from - 1:]))

    def step(self, tokens: Sequence[int], positions: Sequence[int]) -> np.ndarray:
        return np.stack(self.step_runs([[token] for token in tokens], positions))[:, 0]

    def step_runs(self, runs: Sequence[Sequence[int]], positions: Sequence[int]) -> list[np.ndarray]:
        import torch

        lanes = self._lanes
        longest = max(len(run) for run in runs)
        width = run_bucket(longest) if self.compiled else longest  # compiled: a fixed run length per graph
        furthest = max(int(position) for position in positions) + width  # padding tokens are written too
        if furthest > lanes.capacity:
            self._grow(furthest)
        # compiled: the whole bucket's cache (fixed shapes, fixed addresses); eager: just the live rows. Rows past
        # the live lanes feed token 0 from position 0; a run shorter than the width is padded with token 0 at the
        # positions after it, which no later step reads before writing them again (the search's next token for the
        # lane is at or before the run's end)
        rows = lanes.cache.shape[2] if self.compiled else len(lanes.rows)
        row_tokens, row_positions = [[0] * width for _ in range(rows)], [0] * rows
        for row, run, position in zip(lanes.rows, runs, positions):
            row_tokens[row][:len(run)], row_positions[row] = [int(token) for token in run], int(position)
        cos, sin = self._rope_tables(lanes.capacity)
        used = None if self.compiled else furthest  # compiled: every column (fixed shapes)
        cache = lanes.cache if self.compiled else lanes.cache[:, :, :rows]
        arguments = (self.weights, cache, torch.tensor(row_tokens, device=self.device),
                     torch.tensor(row_positions, device=self.device), cos, sin, self._swap, lanes.allowed,
                     lanes.space.probabilities, used)
        progress.tick()
        try:
            with torch.no_grad():
                if self.compiled and self.device.type == "cuda":
                    torch.compiler.cudagraph_mark_step_begin()
                nlls = self._step(*arguments).cpu()  # the step's one device-to-host copy, before the next step
        except out_of_memory_errors():
            raise
        except Exception as error:  # a compiler that cannot build the step (an old GPU, no triton): eagerly
            if not self.compiled:
                raise
            logger.warning("compiling the decode step failed (%s: %s); going on with the eager step",
                           type(error).__name__, str(error).strip().splitlines()[0] if str(error).strip() else "")
            self.compiled, self._step = False, decode_step
            return self.step_runs(runs, positions)
        self.steps += 1
        nlls = nlls.numpy()
        return [nlls[row, :len(run)].astype(np.float64) for row, run in zip(lanes.rows, runs)]

    def keep_lanes(self, lanes: Sequence[int]) -> None:
        import torch

        state = self._lanes
        rows = [state.rows[lane] for lane in lanes]
        count = len(rows)
        freed = sorted(set(range(count)) - set(rows))  # rows below the new count that no kept lane holds
        moving = [index for index, row in enumerate(rows) if row >= count]  # kept lanes beyond it
        if moving:  # one gather and scatter of just the rows that move
            sources = torch.tensor([rows[index] for index in moving], dtype=torch.long, device=self.device)
            targets = torch.tensor(freed, dtype=torch.long, device=self.device)
            state.cache[:, :, targets] = state.cache[:, :, sources]
            for index, row in zip(moving, freed):
                rows[index] = row
        state.rows = rows
        if count and state.bucket < state.cache.shape[2]:  # into the smaller bucket's own cache: one copy
            smaller = self._cache(state.bucket, state.capacity)
            smaller[:, :, :count].copy_(state.cache[:, :, :count])
            state.cache = smaller

    def release(self) -> None:
        self._lanes = None

    # -- scoring -------------------------------------------------------------------------------
    def prompt_prefixes(self, prompts: Sequence[Sequence[int]], space: AnswerSpace) -> _Prompts:
        import torch

        weights = self.weights
        lengths = [len(prompt) for prompt in prompts]
        width = max(lengths)
        ids = torch.full((len(prompts), width), space.eos_id, dtype=torch.long)
        for row, prompt in enumerate(prompts):
            ids[row, :lengths[row]] = torch.tensor([int(t) for t in prompt], dtype=torch.long)
        cache = torch.empty((len(weights.layers), 2, len(prompts), weights.kv_heads, width, weights.head_dim),
                            dtype=self.dtype, device=self.device)

        def store(layer: int, keys, values) -> None:
            cache[layer, 0], cache[layer, 1] = keys, values

        cos, sin = self._rope_tables(capacity_bucket(width + space.max_length))
        last = torch.tensor(lengths, device=self.device) - 1
        progress.tick()
        with torch.no_grad():
            hidden = forward_tokens(weights, ids.to(self.device), torch.arange(width, device=self.device)[None].expand(
                len(prompts), -1), cos, sin, store=store)
            final = hidden[torch.arange(len(prompts), device=self.device), last]
            first = answer_log_probs(logits(weights, final), space.mask(self.vocab_size, self.device),
                                     space.probabilities)
        return _Prompts(cache, last + 1, first)

    def nlls_after(self, prefixes: _Prompts, answers: Sequence[Sequence[int]], rows: Sequence[int],
                   space: AnswerSpace) -> np.ndarray:
        import torch

        targets, valid = answer_targets(answers, space.eos_id)
        targets, valid = targets.to(self.device), valid.to(self.device)
        count, longest = targets.shape
        index = torch.as_tensor(list(rows), dtype=torch.long, device=self.device)
        log_probs = prefixes.first[index][:, None]
        if longest > 1:
            log_probs = torch.cat([log_probs, self._answer_log_probs(prefixes, targets[:, :-1], index, space)], dim=1)
        return summed_nlls(log_probs, targets, valid)

    def _answer_log_probs(self, prefixes: _Prompts, tokens, index, space: AnswerSpace):
        """Log-probabilities after each of ``tokens`` (answers without their last token) after prompt ``index``."""
        import torch

        cache, lengths = prefixes.cache, prefixes.lengths[index]
        width, (count, length) = cache.shape[4], tokens.shape
        shared = bool((index == index[0]).all())

        def prefix(layer: int):
            keys, values = cache[layer, 0], cache[layer, 1]
            if shared:  # every answer reads one prompt: an expanded view, no copy
                first = int(index[0])
                return (keys[first:first + 1].expand(count, -1, -1, -1),
                        values[first:first + 1].expand(count, -1, -1, -1))
            return keys.index_select(0, index), values.index_select(0, index)  # this layer's rows only

        positions = lengths[:, None] + torch.arange(length, device=self.device)[None]
        cos, sin = self._rope_tables(capacity_bucket(width + length + 1))
        prefix_valid = torch.arange(width, device=self.device)[None] < lengths[:, None]
        progress.tick()
        with torch.no_grad():
            hidden = forward_tokens(self.weights, tokens, positions, cos, sin, prefix=prefix,
                                    prefix_valid=prefix_valid)
            return answer_log_probs(logits(self.weights, hidden), space.mask(self.vocab_size, self.device),
                                    space.probabilities)
