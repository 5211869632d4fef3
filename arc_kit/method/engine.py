"""The decode engine: merged weights, static KV caches by lane bucket, one forward (``forward``) for every pass.

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
re-read in place by ``refresh``. Lanes live in a static cache of the pool (``caches``), a lane a row.
A lane's positions are contiguous, so rewinding a DFS branch is only feeding the next token at an
earlier position; nothing is copied per token. The live lanes hold the first rows: when lanes finish,
the rows beyond the new count move into the freed ones, and once they fit a smaller lane bucket, into
its cache; a position past the capacity moves them into a larger one.

Prompts and scored answers run eagerly, at most ``PASS_TOKENS`` tokens a call (a long prompt in
chunks). A step is one of two, each feeding and returning its own shapes (``forward``). Compiled
(``compile``, the default on a GPU): ``padded_step_nlls`` under ``torch.compile(fullgraph=True)``,
every row of the lane bucket fed a run padded to the run bucket (a power of two; token 0, written
past the path and never read before it is written again), one graph per lane bucket and run bucket,
the capacity dynamic, on CUDA with CUDA graphs. Eager: ``ragged_step_nlls``, just the live rows, each
fed only its own run (a long draft costs only its own lane). A compile that fails is said in one
logged line, and the engine goes on eagerly. ``make_engine`` gives this engine where it reads the
model, else ``transformers_forward.TransformersDecoder``. Knows lanes and their rows; knows nothing
of the searches' bookkeeping or tasks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from arc_kit.method.answers import (AnswerSpace, BatchLimit, answer_log_probs, answer_targets, summed_nlls,
                                    with_halving)
from arc_kit.method.caches import CachePool, capacity_bucket, for_compiling
from arc_kit.method.forward import forward, half_swap, logits, padded_step_nlls, ragged_step_nlls
from arc_kit.method.step_costs import StepCosts, lane_bucket
from arc_kit.method.transformers_forward import TransformersDecoder
from arc_kit.method.weights import DecodeWeights, unsupported_reason
from arc_kit.settings import ENGINE_COMPILE_MODES

logger = logging.getLogger(__name__)

PASS_TOKENS = 2048  # tokens of one eager pass (prompt chunks, scored answers): bounds its mask and rotations
FALLBACK_SLOWDOWN = ("about 5x slower than the engine at 16 lanes on the CPU, 30x where a step is mostly overhead, "
                     "as on a GPU (docs/results.md)")  # transformers' forward, one lane at a time: measured


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
        self.on_step = on_step or (lambda: None)
        self.steps = 0  # the steps made (calls of ``step``, whatever the lanes or runs): a search's cost
        self._caches = CachePool(self.weights, compiled=compile)
        self._swap = half_swap(self.weights.head_dim, self.dtype, self.device)
        self._lanes: _Lanes | None = None
        self._costs: dict[tuple[int, int], StepCosts] = {}  # (lane bucket, capacity) -> what a step costs there
        self._compiled = self._compile() if compile else None  # ``padded_step_nlls`` compiled; None: eagerly

    @property
    def compiled(self) -> bool:
        """Whether steps run compiled (until a compile fails: then eagerly, for good)."""
        return self._compiled is not None

    def refresh(self) -> None:
        """Read the model's weights again (after its adapter was trained, reset, enabled or disabled)."""
        self.weights.refresh()

    def _compile(self):
        """``padded_step_nlls`` compiled (module docstring), what it reads readied (``caches.for_compiling``)."""
        import torch

        for tensor in [*self.weights.tensors(), self._swap]:
            for_compiling(tensor)
        config = torch._dynamo.config  # a graph per lane and run bucket, more than the default limit allows
        limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"  # older torch
        setattr(config, limit, max(getattr(config, limit), 64))
        mode = "reduce-overhead" if self.device.type == "cuda" else None
        return torch.compile(padded_step_nlls, fullgraph=True, mode=mode)

    def _cache(self, bucket: int, capacity: int):
        """The pool's cache for (bucket, capacity), never dropping the search's own to make room."""
        return self._caches.cache(bucket, capacity, held=self._lanes.cache if self._lanes is not None else None)

    def _feed(self, cache, runs: Sequence[Sequence[int]], positions: Sequence[int]):
        """Hidden states (rows, longest run, hidden) after row r of ``cache`` is fed ``runs[r]`` from ``positions[r]``,
        eagerly, in passes of at most ``PASS_TOKENS`` tokens (a shorter run padded with token 0 past its end)."""
        import torch

        longest = max(len(run) for run in runs)
        chunk = max(1, PASS_TOKENS // len(runs))
        cos, sin = self._caches.rope(cache.shape[4])
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

    def _fit(self, positions: int) -> None:
        """Move the search's live rows into a cache of the capacity bucket of ``positions`` if they do not fit (one
        copy)."""
        lanes, live = self._lanes, len(self._lanes.rows)
        if positions > lanes.capacity:
            bigger = self._cache(lanes.bucket, capacity_bucket(positions))
            bigger[:, :, :live, :, :lanes.capacity].copy_(lanes.cache[:, :, :live])
            lanes.cache = bigger

    def prefill(self, lane: int, ids: Sequence[int], logits_from: int) -> np.ndarray:
        import torch

        lanes = self._lanes
        self._fit(len(ids))
        row = lanes.rows[lane]
        hidden = self._feed(lanes.cache[:, :, row:row + 1], [ids], [0])
        with torch.no_grad():
            log_probs = answer_log_probs(logits(self.weights, hidden[0, logits_from - 1:]), lanes.allowed,
                                         lanes.space.probabilities)
        return (-log_probs).cpu().numpy().astype(np.float64)

    def step(self, runs: Sequence[Sequence[int]], positions: Sequence[int]) -> list[np.ndarray]:
        """Feed live lane i ``runs[i]`` (at least one token) at ``positions[i]``, ``positions[i] + 1``, ...;
        per lane its NLL rows (len(runs[i]), vocab), row j after ``runs[i][:j + 1]``."""
        nlls = self._step(self._lanes.rows, runs, positions)
        self.steps += 1
        return nlls

    def step_costs(self, positions: Sequence[int], width: int) -> StepCosts:
        """What a step costs here (``step_costs.StepCosts.timed``), measured once per lane bucket (compiled: and
        capacity bucket, a graph each) by steps of the live lanes that ``steps`` does not count, each lane fed at its
        ``positions``, past all it holds: nothing written there is read before it is written again."""
        lanes = self._lanes
        key = (lanes.bucket, lanes.capacity) if self.compiled else lanes.bucket
        if key not in self._costs:
            at = dict(zip(lanes.rows, positions))  # cache row -> the position it is probed at
            self._costs[key] = StepCosts.timed(lambda lengths: self._step(  # lengths[r]: the run fed to row r
                range(len(lengths)), [[0] * length for length in lengths], [at[row] for row in range(len(lengths))]),
                len(lanes.rows), width, compiled=self.compiled)
        return self._costs[key]

    def _step(self, rows: Sequence[int], runs: Sequence[Sequence[int]], positions: Sequence[int]) -> list[np.ndarray]:
        """``step`` uncounted, cache row ``rows[i]`` fed ``runs[i]`` (``rows``: each of 0..len(rows)-1 once): compiled,
        or eagerly once a compile failed (said in one logged line)."""
        import torch

        self.on_step()
        if self.compiled:
            try:
                return self._padded_step(rows, runs, positions)
            except torch.cuda.OutOfMemoryError:
                raise  # left to the search's halving, never taken for a compiler's failure
            except Exception as error:  # a compiler that cannot build the step (an old GPU, no triton)
                lines = str(error).strip().splitlines()
                logger.warning("compiling the decode step failed (%s: %s); going on with the eager step",
                               type(error).__name__, lines[0] if lines else "")
                self._compiled, self._caches.compiled = None, False
        return self._ragged_step(rows, runs, positions)

    def _padded_step(self, rows, runs, positions) -> list[np.ndarray]:
        """The compiled step (``padded_step_nlls``): every row of the lane bucket's cache fed a run of the run bucket,
        every column attended. A run is padded with token 0, written past its lane's path and never read before it
        is written again; a row no lane holds is fed token 0 at position 0."""
        import torch

        width = lane_bucket(max(len(run) for run in runs))  # a fixed run length per graph
        self._fit(max(int(position) + width for position in positions))
        lanes = self._lanes
        tokens, at = self._tokens(rows, runs, positions, lanes.cache.shape[2], width)
        cos, sin = self._caches.rope(lanes.capacity)
        with torch.no_grad():
            if self.device.type == "cuda":
                torch.compiler.cudagraph_mark_step_begin()
            nlls = self._compiled(self.weights, lanes.cache, tokens, at, cos, sin, self._swap, lanes.allowed,
                                  lanes.space.probabilities).cpu().numpy()  # the step's one device-to-host copy
        return [nlls[row, :len(run)].astype(np.float64) for row, run in zip(rows, runs)]

    def _ragged_step(self, rows, runs, positions) -> list[np.ndarray]:
        """The eager step (``ragged_step_nlls``): just the live rows (the cache's first ``len(rows)``), each fed only
        its own run, the columns up to the furthest position fed attended."""
        import torch

        furthest = max(int(position) + len(run) for run, position in zip(runs, positions))
        self._fit(furthest)
        lanes, lengths = self._lanes, [0] * len(rows)
        for row, run in zip(rows, runs):
            lengths[row] = len(run)
        tokens, at = self._tokens(rows, runs, positions, len(rows), max(lengths))
        cos, sin = self._caches.rope(lanes.capacity)
        with torch.no_grad():
            nlls = ragged_step_nlls(self.weights, lanes.cache[:, :, :len(rows)], tokens, at, lengths, furthest, cos,
                                    sin, self._swap, lanes.allowed, lanes.space.probabilities).numpy()
        ends = np.cumsum(lengths)  # the rows' tokens, row by row
        return [nlls[ends[row] - len(run):ends[row]].astype(np.float64) for row, run in zip(rows, runs)]

    def _tokens(self, rows, runs, positions, count: int, width: int):
        """(tokens (count, width), positions (count,)) on the device: row ``rows[i]`` holds ``runs[i]`` padded with
        token 0 from ``positions[i]``; a row no run is fed holds token 0 at position 0."""
        import torch

        tokens, at = [[0] * width for _ in range(count)], [0] * count
        for row, run, position in zip(rows, runs, positions):
            tokens[row][:len(run)], at[row] = [int(token) for token in run], int(position)
        return torch.tensor(tokens, device=self.device), torch.tensor(at, device=self.device)

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
