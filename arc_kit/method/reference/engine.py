"""The reference decode engine: transformers' own forward and caches behind ``DecodeEngine``.

Slow and trusted; also what runs any model the fast engine does not support (8-bit or other
quantizers' weights, unsloth, other architectures). It is the kit's earlier decoding, moved behind
the interface:

- one lane (``start(1, ...)``): a ``DynamicCache``; a step at position p first rewinds the cache to
  p (``caches.rewind_cache``), then feeds the token: what ``dfs_search`` always did;
- several lanes: a ``caches.LaneCache`` (one row per lane, allocated once). Each step writes one
  column for all lanes in place; a lane's *valid* columns are those holding its positions 0..p, and
  an attention mask (``valid``) hides the rest (padding, the unfollowed part of a guess, abandoned
  branches). Rewinding moves no memory: a step at position p marks the lane's columns of positions
  p and later invalid. Positions are given per lane, so a token sees the same keys at the same
  rotary positions as in a one-lane search. When the columns run out, each lane's path is moved
  behind the prompts (and the room doubled if the paths still fill half of it). A step is made in
  calls of at most ``limit.size`` lanes, halved on out-of-memory errors (``engine.with_halving``);
- scoring: the prompts right-padded in one forward, and the answers through
  ``nlls.nlls_after_prompts`` (each layer's prompt rows read only while that layer runs).

Knows transformers' caches; knows nothing of tasks, grids or the searches' bookkeeping.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from arc_kit.method.answers import AnswerSpace, answer_log_probs
from arc_kit.method.engine import BatchLimit, DecodeEngine, with_halving
from arc_kit.method.reference.caches import LaneCache, cache_tensors, call_with_cache, new_cache, rewind_cache
from arc_kit.method.reference.nlls import nlls_after_prompts


@dataclass
class _LaneColumns:
    """Where one lane's tokens lie in the lane cache: ``columns[q]`` holds its position q."""

    prompt_length: int  # positions [0, prompt_length) are the prompt: never rewound
    columns: list[int]


@dataclass
class _PromptCache:
    tensors: list  # per layer (keys, values), (prompts, heads, width, head dim)
    first: object  # (prompts, vocab) log-probabilities of each prompt's first answer token
    lengths: list[int]


class ReferenceEngine(DecodeEngine):
    """``DecodeEngine`` on transformers' forward (module docstring)."""

    kind = "reference"

    def __init__(self, model):
        self.model = model
        self.device = next(model.parameters()).device
        self._cache = None  # a DynamicCache (one lane) or a LaneCache (several)
        self._lanes: list[_LaneColumns] = []
        self._valid = None  # (live lanes, capacity) bool, on the CPU; built at the first step
        self._width = 0  # columns of the longest first pass: paths are compacted to behind them
        self._mask = None
        self._space: AnswerSpace | None = None
        self._limit = BatchLimit("lanes")

    @property
    def vocab_size(self) -> int:
        return int(self.model.config.vocab_size)

    def _nlls(self, logits) -> np.ndarray:
        """Next-token NLLs of logits (..., vocab) under the started space, as float64 numpy."""
        if self._mask is None or self._mask.shape[0] != logits.shape[-1]:
            self._mask = self._space.mask(logits.shape[-1], logits.device)
        return (-answer_log_probs(logits, self._mask, self._space.probabilities)).double().cpu().numpy()

    # -- lanes ---------------------------------------------------------------------------------
    def start(self, lanes: int, capacity: int, space: AnswerSpace, limit: BatchLimit | None = None) -> None:
        self._space, self._limit = space, limit if limit is not None else BatchLimit("lanes")
        self._mask = None  # made for this space at the first output
        self._cache = None if lanes == 1 else LaneCache(lanes, capacity)
        self._lanes = [_LaneColumns(0, []) for _ in range(lanes)]
        self._valid = None

    def prefill(self, lane: int, ids: Sequence[int], logits_from: int) -> np.ndarray:
        import torch

        tensor = torch.tensor([[int(t) for t in ids]], dtype=torch.long, device=self.device)
        with torch.no_grad():
            output, cache = call_with_cache(self.model, new_cache(self.model), input_ids=tensor)
        increments = self._nlls(output.logits[0, logits_from - 1:])
        if isinstance(self._cache, LaneCache):
            self._cache.put(lane, cache)
            self._lanes[lane] = _LaneColumns(logits_from, list(range(len(ids))))
        else:
            self._cache = cache
        return increments

    def step(self, tokens: Sequence[int], positions: Sequence[int]) -> np.ndarray:
        return np.stack(self.step_runs([[token] for token in tokens], positions))[:, 0]

    def step_runs(self, runs: Sequence[Sequence[int]], positions: Sequence[int]) -> list[np.ndarray]:
        import torch

        self.steps += 1
        if not isinstance(self._cache, LaneCache):
            rewind_cache(self._cache, int(positions[0]))
            with torch.no_grad():
                output, self._cache = call_with_cache(self.model, self._cache, input_ids=torch.tensor(
                    [[int(token) for token in runs[0]]], device=self.device))
            return [self._nlls(output.logits[0])]
        return self._step_lanes(runs, positions)

    def _step_lanes(self, runs: Sequence[Sequence[int]], positions: Sequence[int]) -> list[np.ndarray]:
        import torch

        cache, width = self._cache, max(len(run) for run in runs)
        if self._valid is None:  # the first step: every first pass is in
            self._valid, self._width = self._valid_columns(), cache.length
        if cache.length + width > cache.capacity:  # no room left for this step's columns
            self._compact(width)
        length, valid = cache.length, self._valid
        for row, (lane, run, position) in enumerate(zip(self._lanes, runs, positions)):
            valid[row, lane.columns[position:]] = False  # the rewind: the abandoned branch is hidden
            del lane.columns[position:]
            lane.columns += range(length, length + len(run))
            valid[row, length:length + len(run)] = True  # a shorter run's padding columns stay hidden
        padded = [[int(token) for token in run] + [0] * (width - len(run)) for run in runs]
        step = (torch.tensor(padded, device=self.device),
                torch.tensor([[int(p) + offset for offset in range(width)] for p in positions], device=self.device),
                valid[:, :length + width].to(device=self.device, dtype=torch.long))
        with torch.no_grad():
            rows = with_halving(self._limit, len(runs), lambda size: self._step_rows(step, size))
        cache.length += width
        return [lane_rows[:len(run)] for lane_rows, run in zip(rows, runs)]

    def _step_rows(self, step: tuple, size: int) -> np.ndarray:
        """The step of every live lane, ``size`` lanes per model call; safe to repeat (it writes the same columns).

        (lanes, run width, vocab) NLLs. A padding token sees the lane's run before it (its own column is
        hidden): its row is computed, never read."""
        tokens, positions, attention = step
        pieces = []
        for start in range(0, tokens.shape[0], size):
            rows = slice(start, min(start + size, tokens.shape[0]))
            output = call_with_cache(self.model, self._cache.view(self.model, rows), input_ids=tokens[rows],
                                     attention_mask=attention[rows], position_ids=positions[rows])[0]
            pieces.append(self._nlls(output.logits))
            del output
        return np.concatenate(pieces)

    def _valid_columns(self):
        """The attention mask of the live lanes: each lane's columns of its positions."""
        import torch

        valid = torch.zeros((len(self._lanes), self._cache.capacity), dtype=torch.bool)
        for row, lane in enumerate(self._lanes):
            valid[row, lane.columns] = True
        return valid

    def _compact(self, needed: int = 1) -> None:
        """Each lane's path (positions from its prompt's end) moved to the columns right after the longest
        first pass, the room doubled first if the paths and ``needed`` more columns would fill half of it."""
        import torch

        cache, width = self._cache, self._width
        paths = [lane.columns[lane.prompt_length:] for lane in self._lanes]
        longest = max(len(path) for path in paths)
        room = cache.capacity - width
        if 2 * (longest + needed - 1) >= room:  # one layer at a time; the finished lanes' rows are dropped on the way
            cache.grow(width + max(2 * room, longest + needed), rows=len(self._lanes))
        columns = torch.zeros((len(self._lanes), longest), dtype=torch.long)  # short paths padded with column 0
        for row, (lane, path) in enumerate(zip(self._lanes, paths)):
            columns[row, :len(path)] = torch.tensor(path, dtype=torch.long)
            lane.columns = lane.columns[:lane.prompt_length] + list(range(width, width + len(path)))
        cache.move_columns(columns, width)
        self._valid = self._valid_columns()

    def keep_lanes(self, lanes: Sequence[int]) -> None:
        lanes = list(lanes)
        if isinstance(self._cache, LaneCache):
            self._cache.keep_rows(lanes)
            if self._valid is not None:
                self._valid = self._valid[lanes]
        self._lanes = [self._lanes[lane] for lane in lanes]

    def release(self) -> None:
        self._cache, self._lanes, self._valid = None, [], None

    # -- scoring -------------------------------------------------------------------------------
    def prompt_prefixes(self, prompts: Sequence[Sequence[int]], space: AnswerSpace) -> _PromptCache:
        import torch

        lengths = [len(prompt) for prompt in prompts]
        ids = torch.full((len(prompts), max(lengths)), space.eos_id, dtype=torch.long)
        for row, prompt in enumerate(prompts):
            ids[row, :lengths[row]] = torch.tensor([int(t) for t in prompt], dtype=torch.long)
        last = torch.tensor(lengths) - 1
        kept = torch.unique(last)  # logits at each prompt's last position only, not at every position
        with torch.no_grad():
            # Right padding needs no attention mask here: causal attention keeps every real token
            # from seeing the padding after it. Answers mask the padding out.
            output, cache = call_with_cache(self.model, new_cache(self.model), input_ids=ids.to(self.device),
                                            logits_to_keep=kept.to(self.device))
        mask = space.mask(output.logits.shape[-1], self.device)
        picked = torch.searchsorted(kept, last).to(self.device)
        first = answer_log_probs(output.logits[torch.arange(len(prompts), device=self.device), picked], mask,
                                 space.probabilities)
        return _PromptCache(cache_tensors(cache), first, lengths)

    def nlls_after(self, prefixes: _PromptCache, answers: Sequence[Sequence[int]], rows: Sequence[int],
                   space: AnswerSpace) -> np.ndarray:
        return nlls_after_prompts(self.model, prefixes.tensors, prefixes.first, answers, rows, space, prefixes.lengths)
