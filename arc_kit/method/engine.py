"""The decode engine: merged weights, a static KV cache per lane bucket, one forward (``forward``) for every pass.

A search holds *lanes*, one per prompt, numbered 0.. in the order they were started: ``start(lanes,
capacity, space)`` makes room (``capacity``: positions per lane, grown when needed); ``prefill(lane,
ids, logits_from)`` runs a lane's prompt (and guess) and returns the next-token NLLs after each of
``ids[:logits_from]``, ..., ``ids``; ``step(runs, positions)`` feeds each live lane a run of tokens (a
DFS branch's token and its draft) from its own position, all lanes in one model call, and returns an
NLL row after each token; ``keep_lanes(lanes)`` keeps the given live lanes (increasing) as lanes 0..;
``release()`` ends the search; ``steps`` counts the steps; ``step_costs(positions, width)`` says what a
step costs here (``step_costs.StepCosts``, from timed steps that no search reads back). ``score(prompts,
answers, space)`` gives every answer's NLL after its prompt: each prompt run once into a lane, its keys
and values copied into the lanes of its answers, the answers fed as runs after it. NLLs are
``-answer_log_probs`` under the given space, float64 numpy rows. ``on_step`` (no arguments: a
worker's heartbeat) is called once per model pass.

The weights are read once into ``weights.DecodeWeights`` (eagerly on the CPU, packed for oneDNN) and
re-read in place by ``refresh``. Lanes live in a static cache (layers, 2, lanes, kv heads, capacity,
head dim), one per (lane bucket: a power of two; capacity: 256, 512, 1024, then multiples of 1024),
kept in a pool for the next search or scoring. A lane's positions are contiguous, so rewinding a DFS
branch is only feeding the next token at an earlier position; nothing is copied per token. The live
lanes hold the first rows: when lanes finish, the rows beyond the new count move into the freed
ones, and once they fit a smaller bucket, into its cache; a position past the capacity moves the
cache into a larger one.

Prompts and scored answers run eagerly, at most ``PASS_TOKENS`` tokens a call (a long prompt in
chunks). A step runs eagerly on exactly the live lanes, their runs ragged (a long draft costs only
its own lane), or compiled (``compile``, the default on a GPU): ``forward.step_nlls`` under
``torch.compile(fullgraph=True)``, one graph per lane bucket and run bucket (runs padded to a power of
two with token 0, written past the path and never read before they are written again), the capacity
dynamic, on CUDA with CUDA graphs (cache and weights at fixed addresses); if compiling fails the
engine logs one line and goes on eagerly. ``make_engine`` gives this engine where it reads the model,
else ``transformers_forward.TransformersDecoder``. Knows lanes, buckets and the cache; knows nothing
of the searches' bookkeeping or tasks.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from arc_kit.method.answers import (AnswerSpace, BatchLimit, answer_log_probs, answer_targets, summed_nlls,
                                    with_halving)
from arc_kit.method.forward import forward, half_swap, logits, rope_tables, step_nlls
from arc_kit.method.step_costs import StepCosts, lane_bucket
from arc_kit.method.transformers_forward import TransformersDecoder
from arc_kit.method.weights import DecodeWeights, unsupported_reason
from arc_kit.settings import ENGINE_COMPILE_MODES

logger = logging.getLogger(__name__)

POOL_BYTES = 4 * 2**30  # caches kept for later searches, least recently used dropped first beyond this
PASS_TOKENS = 2048  # tokens of one eager pass (prompt chunks, scored answers): bounds its mask and rotations
FALLBACK_SLOWDOWN = ("about 5x slower than the engine at 16 lanes on the CPU, 30x where a step is mostly overhead, "
                     "as on a GPU (docs/results.md)")  # transformers' forward, one lane at a time: measured


def capacity_bucket(positions: int) -> int:
    """The capacity of a cache for ``positions`` positions: 256, 512 or 1024, else the next multiple of 1024."""
    return next((small for small in (256, 512, 1024) if positions <= small), -(-positions // 1024) * 1024)


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


class Engine:
    """Lanes of searches and prefix-reusing scoring on the decoder over merged weights (module docstring)."""

    kind = "engine"

    def __init__(self, model, *, compile: bool = False, on_step: Callable[[], None] | None = None):
        self.model = model
        self.weights = DecodeWeights(model, pack=not compile)  # eager on the CPU: packed
        self.device, self.dtype, self.vocab_size = self.weights.device, self.weights.dtype, self.weights.vocab_size
        self.compiled, self.on_step = compile, on_step or (lambda: None)
        self.steps = 0  # the steps made (calls of ``step``, whatever the lanes or runs): a search's cost
        self._pool: OrderedDict = OrderedDict()  # (bucket, capacity) -> cache, most recently used last
        self._rope: dict[int, tuple] = {}  # capacity -> (cos, sin)
        self._swap = half_swap(self.weights.head_dim, self.dtype, self.device)
        self._lanes: _Lanes | None = None
        self._costs: dict[tuple[int, int], StepCosts] = {}  # (lane bucket, capacity) -> what a step costs there
        self._step = self._compiled_step() if compile else step_nlls
        for tensor in [*self.weights.tensors(), self._swap]:
            self._fixed(tensor)

    def refresh(self) -> None:
        """Read the model's weights again (after its adapter was trained, reset, enabled or disabled)."""
        self.weights.refresh()

    def _compiled_step(self):
        """``step_nlls`` compiled (module docstring); the capacity a dynamic dimension (``_fixed``)."""
        import torch

        config = torch._dynamo.config  # a graph per lane and run bucket, more than the default limit allows
        limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"  # older torch
        setattr(config, limit, max(getattr(config, limit), 64))
        return torch.compile(step_nlls, fullgraph=True, mode="reduce-overhead" if self.device.type == "cuda" else None)

    def _fixed(self, tensor, capacity_dimension: int | None = None):
        """``tensor`` readied for the compiled step: its address static under CUDA graphs, its capacity dynamic.
        Every tensor the step reads is made here but the few hundred bytes of tokens, positions and mask."""
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
        needed = int(np.prod(shape)) * torch.finfo(self.dtype).bits // 8
        held = self._lanes.cache if self._lanes is not None else None
        for old in list(self._pool):  # the least recently used first, never the current search's
            if sum(cache.numel() * cache.element_size() for cache in self._pool.values()) + needed <= POOL_BYTES:
                break
            if self._pool[old] is not held:
                del self._pool[old]
        self._pool[key] = self._fixed(torch.zeros(shape, dtype=self.dtype, device=self.device), capacity_dimension=4)
        return self._pool[key]

    def _rope_tables(self, capacity: int):
        """The model's rope (cos, sin) at positions 0..capacity-1, made once per capacity."""
        if capacity not in self._rope:
            tables = rope_tables(self.weights.config, self.weights.head_dim, capacity, self.dtype, self.device)
            self._rope[capacity] = tuple(self._fixed(table, capacity_dimension=0) for table in tables)
        return self._rope[capacity]

    def _feed(self, cache, runs: Sequence[Sequence[int]], positions: Sequence[int]):
        """Hidden states (rows, longest run, hidden) after row r of ``cache`` is fed ``runs[r]`` from ``positions[r]``,
        eagerly, in passes of at most ``PASS_TOKENS`` tokens (a shorter run padded with token 0 past its end)."""
        import torch

        longest = max(len(run) for run in runs)
        chunk = max(1, PASS_TOKENS // len(runs))
        cos, sin = self._rope_tables(cache.shape[4])
        pieces = []
        self.on_step()
        with torch.no_grad():
            for start in range(0, longest, chunk):
                width = min(chunk, longest - start)
                tokens = torch.tensor([([int(token) for token in run[start:start + width]] + [0] * width)[:width]
                                       for run in runs], device=self.device)
                at = torch.tensor([int(position) + start for position in positions], device=self.device)
                hidden = forward(self.weights, cache, tokens, at, cos, sin, self._swap, int(at.max()) + width)
                pieces.append(hidden.view(len(runs), width, -1))
        return torch.cat(pieces, dim=1)

    # -- lanes ---------------------------------------------------------------------------------
    def start(self, lanes: int, capacity: int, space: AnswerSpace) -> None:
        self._lanes = _Lanes(self._cache(lane_bucket(lanes), capacity_bucket(capacity)), list(range(lanes)), space,
                             space.mask(self.vocab_size, self.device))

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
        row = lanes.rows[lane]
        hidden = self._feed(lanes.cache[:, :, row:row + 1], [ids], [0])
        with torch.no_grad():
            log_probs = answer_log_probs(logits(self.weights, hidden[0, logits_from - 1:]), lanes.allowed,
                                         lanes.space.probabilities)
        return (-log_probs).cpu().numpy().astype(np.float64)

    def step(self, runs: Sequence[Sequence[int]], positions: Sequence[int]) -> list[np.ndarray]:
        """Feed live lane i ``runs[i]`` (at least one token) at ``positions[i]``, ``positions[i] + 1``, ...;
        per lane its NLL rows (len(runs[i]), vocab), row j after ``runs[i][:j + 1]``."""
        nlls = self._run_step(runs, positions, self._lanes.rows)
        self.steps += 1
        return nlls

    def step_costs(self, positions: Sequence[int], width: int) -> StepCosts:
        """What a step costs here (``step_costs.StepCosts``), measured once per lane bucket (compiled: and capacity
        bucket, a graph each) by timed steps of the live lanes (eagerly the best of two; compiled the best of three
        after one that builds the graph), none counted in ``steps``: one lane and every lane fed a token, every lane
        ``width`` tokens, one lane ``width`` and the others one. Each lane is fed at its ``positions``, past all it
        holds: nothing written there is read before it is written again."""
        lanes = self._lanes
        key = (lanes.bucket, lanes.capacity) if self.compiled else lanes.bucket
        if key not in self._costs:
            at = dict(zip(lanes.rows, positions))  # cache row -> the position it is probed at
            count = len(lanes.rows)

            def seconds(lengths: list[int]) -> float:  # lengths[r]: the run fed to row r (rows 0.. are the live ones)
                times = []
                for _ in range(4 if self.compiled else 2):  # eagerly a probe costs what a search's steps do: few
                    started = time.perf_counter()
                    self._run_step([[0] * length for length in lengths], [at[row] for row in range(len(lengths))],
                                   range(len(lengths)))
                    times.append(time.perf_counter() - started)
                return min(times[1:] if self.compiled else times)  # compiled, the first builds the graph

            one = 0.0 if self.compiled else seconds([1])
            every = one if count == 1 and not self.compiled else seconds([1] * count)
            self._costs[key] = StepCosts.measured(
                count, width, one, every, seconds([width] * count),
                None if self.compiled or count == 1 else seconds([width] + [1] * (count - 1)), buckets=self.compiled)
        return self._costs[key]

    def _run_step(self, runs: Sequence[Sequence[int]], positions: Sequence[int], fed_rows: Sequence[int]
                  ) -> list[np.ndarray]:
        """``step`` uncounted, run ``runs[i]`` fed to cache row ``fed_rows[i]`` (eagerly, the rows 0.. are computed:
        ``fed_rows`` must hold each of them once)."""
        import torch

        lanes = self._lanes
        longest = max(len(run) for run in runs)
        width = lane_bucket(longest) if self.compiled else longest  # compiled: a fixed run length per graph
        # compiled: the whole bucket's cache, every run padded to the width with token 0 (module docstring); eager: just
        # the live rows, ragged (each row's padding neither computed nor written)
        furthest = max(int(position) + (width if self.compiled else len(run)) for run, position in zip(runs, positions))
        if furthest > lanes.capacity:
            self._grow(furthest)
        rows = lanes.cache.shape[2] if self.compiled else len(fed_rows)
        row_tokens, row_positions, row_lengths = [[0] * width for _ in range(rows)], [0] * rows, [width] * rows
        for row, run, position in zip(fed_rows, runs, positions):  # rows past the live lanes: token 0 at 0
            row_tokens[row][:len(run)] = [int(token) for token in run]
            row_positions[row], row_lengths[row] = int(position), len(run)
        cos, sin = self._rope_tables(lanes.capacity)
        used = None if self.compiled else furthest  # compiled: every column (fixed shapes)
        cache = lanes.cache if self.compiled else lanes.cache[:, :, :rows]
        ragged = not self.compiled and min(row_lengths) < width  # runs of one length: nothing to leave out
        lengths = torch.tensor(row_lengths, device=self.device) if ragged else None
        arguments = (self.weights, cache, torch.tensor(row_tokens, device=self.device),
                     torch.tensor(row_positions, device=self.device), cos, sin, self._swap, lanes.allowed,
                     lanes.space.probabilities, used, lengths)
        self.on_step()
        try:
            with torch.no_grad():
                if self.compiled and self.device.type == "cuda":
                    torch.compiler.cudagraph_mark_step_begin()
                nlls = self._step(*arguments).cpu()  # the step's one device-to-host copy, before the next step
        except Exception as error:  # a compiler that cannot build the step (an old GPU, no triton): eagerly
            if not self.compiled or isinstance(error, torch.cuda.OutOfMemoryError):
                raise
            logger.warning("compiling the decode step failed (%s: %s); going on with the eager step",
                           type(error).__name__, str(error).strip().splitlines()[0] if str(error).strip() else "")
            self.compiled, self._step = False, step_nlls
            return self._run_step(runs, positions, fed_rows)
        nlls = nlls.numpy()
        if not ragged:
            return [nlls[row, :len(run)].astype(np.float64) for row, run in zip(fed_rows, runs)]
        ends = np.cumsum(row_lengths)  # eager: the rows' tokens, row by row
        return [nlls[ends[row] - len(run):ends[row]].astype(np.float64) for row, run in zip(fed_rows, runs)]

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
    def score(self, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[Sequence[int]]], space: AnswerSpace,
              batch_size: int = 16, limit: BatchLimit | None = None) -> list[np.ndarray]:
        """The NLLs of ``answers[p]`` (each through its eos) after ``prompts[p]``, for every p (module docstring); up
        to ``batch_size`` answers (similar lengths together) share a call, fewer after an out-of-memory error
        (``limit``, which ends as the size that fitted). Prompts without answers are never run. Equal to one full
        forward per answer up to float rounding."""
        if len(answers) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(answers)} lists of answers")
        limit = limit if limit is not None else BatchLimit("answers")
        return [self._score_prompt([int(t) for t in prompt], chunk, space, batch_size, limit) if len(chunk)
                else np.zeros(0) for prompt, chunk in zip(prompts, answers)]

    def _score_prompt(self, prompt: list[int], answers, space: AnswerSpace, batch_size: int, limit: BatchLimit):
        import torch

        targets, valid = answer_targets(answers, space.eos_id)
        allowed = space.mask(self.vocab_size, self.device)
        capacity = capacity_bucket(len(prompt) + targets.shape[1])
        held = []  # the cache that holds the prompt in its first rows, how many, the log-probabilities after it
        results = np.zeros(len(answers))
        order = sorted(range(len(answers)), key=lambda index: int(valid[index].sum()))  # similar lengths together

        def score_rows(chunk: list[int]) -> int:
            if not held:  # the prompt's one pass, into a cache of as many rows as the first call takes (later calls
                # take no more: fewer after an out-of-memory error)
                cache = self._cache(lane_bucket(len(chunk)), capacity)
                hidden = self._feed(cache[:, :, :1], [prompt], [0])
                with torch.no_grad():
                    held[:] = cache, 1, answer_log_probs(logits(self.weights, hidden[0, -1:]), allowed,
                                                         space.probabilities)
            cache, rows, first = held
            if rows < len(chunk):  # the prompt's keys and values copied into the rows of the answers
                cache[:, :, rows:len(chunk), :, :len(prompt)] = cache[:, :, :1, :, :len(prompt)]
                held[1] = len(chunk)
            rows_targets, rows_valid = targets[chunk].to(self.device), valid[chunk].to(self.device)
            length = int(rows_valid.sum(dim=1).max())
            log_probs = first.expand(len(chunk), 1, -1)
            if length > 1:  # every answer but its last token, after the prompt: one pass
                runs = [rows_targets[row, :length - 1].tolist() for row in range(len(chunk))]
                hidden = self._feed(cache[:, :, :len(chunk)], runs, [len(prompt)] * len(chunk))
                with torch.no_grad():
                    rest = answer_log_probs(logits(self.weights, hidden), allowed, space.probabilities)
                log_probs = torch.cat([log_probs, rest], dim=1)
            results[chunk] = summed_nlls(log_probs, rows_targets[:, :length], rows_valid[:, :length])
            return len(chunk)

        done = 0
        while done < len(order):
            done += with_halving(limit, min(batch_size, len(order) - done),
                                 lambda size, start=done: score_rows(order[start:start + size]))
        return results


def compiles(compile: str, model) -> bool:
    """Whether the engine compiles its step: ``compile`` "on", or "auto" on a CUDA device."""
    if compile not in ENGINE_COMPILE_MODES:
        raise ValueError(f"unknown engine compile mode {compile!r}; expected one of {ENGINE_COMPILE_MODES}")
    return compile == "on" or (compile == "auto" and next(model.parameters()).device.type == "cuda")


def make_engine(model, compile: str = "auto", on_step: Callable[[], None] | None = None):
    """The engine for ``model`` (``compile``: "auto", "on" or "off"); for a model it cannot read, transformers' own
    forward (``TransformersDecoder``), with one logged line saying why and what it costs."""
    reason = unsupported_reason(model)
    if reason is None:
        return Engine(model, compile=compiles(compile, model), on_step=on_step)
    logger.warning("the engine cannot run this model (%s); transformers' own forward runs it, one lane at a time, "
                   "%s", reason, FALLBACK_SLOWDOWN)
    return TransformersDecoder(model, on_step=on_step)
