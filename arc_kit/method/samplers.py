"""Candidate generation behind one interface: DFS (the default), greedy, stochastic sampling, beam search.

``generate(engine, prompt_ids, space, settings)`` returns a ``SearchResult`` whatever the sampler;
``engine`` is a ``engine.DecodeEngine`` (or a model: ``engines.as_engine``). DFS and greedy
decoding run on the engine. Greedy takes the most probable token at each step: under the full
softmax (``space.probabilities`` "full") over the whole vocabulary, so a completion may hold a token
that is no answer token (its NLL is then infinite: it fails to decode, and the solver counts it as
not a grid); under "answer-mask" over the answer tokens only. Stochastic sampling and beam search
are reference-only: they go through transformers' ``generate`` on the engine's model (the same
choice of vocabulary), and their answers' NLLs are then measured by the engine's scorer, the same
way as DFS and the scorer measure them. Answers that never reach eos are dropped and counted.
Stochastic sampling draws from a ``torch.Generator`` state seeded by the caller; the global
generator is left as it was. A ``deadline`` (``time.monotonic()``) bounds every sampler: DFS and
greedy check it before each model call, the others through a stopping criterion checked after each
generated token (their answers found by then are measured by one more forward); a search stopped by
it says so in ``capped``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

import numpy as np

from arc_kit.method.answers import AnswerSpace, Completion, SearchResult, deadline_passed
from arc_kit.method.dfs import DEADLINE_BEFORE_START, dfs_search
from arc_kit.method.drafts import DraftSource
from arc_kit.method.engine import DecodeEngine
from arc_kit.method.engines import as_engine
from arc_kit.settings import SamplerSettings


class _AllowedTokens:
    """A logits processor for ``generate``: every token outside the answer alphabet gets -inf."""

    def __init__(self, space: AnswerSpace):
        self.space, self.mask = space, None

    def __call__(self, input_ids, scores):
        if self.mask is None or self.mask.device != scores.device:
            self.mask = self.space.mask(scores.shape[-1], scores.device)
        return scores.masked_fill(~self.mask, float("-inf"))


def generate(engine, prompt_ids: Sequence[int], space: AnswerSpace, settings: SamplerSettings = SamplerSettings(),
             guess: Sequence[int] | None = None, seed: int = 0, *, deadline: float | None = None,
             drafts: DraftSource | None = None) -> SearchResult:
    """Answers to a prompt from the chosen sampler (``guess`` and ``drafts`` are used by DFS only), found by
    ``deadline``."""
    engine = as_engine(engine)
    if settings.kind == "dfs":
        return dfs_search(engine, prompt_ids, space, settings,
                          guess if settings.use_guess else None, deadline=deadline, drafts=drafts)
    if settings.kind == "greedy":
        return greedy_search(engine, prompt_ids, space, deadline=deadline)
    return _generate_baseline(engine, prompt_ids, space, settings, seed, deadline)


def greedy_search(engine: DecodeEngine, prompt_ids: Sequence[int], space: AnswerSpace, *,
                  deadline: float | None = None) -> SearchResult:
    """The most probable token at each step until eos or ``space.max_length`` tokens, on the engine's one lane.

    The choice is over the whole vocabulary under "full" probabilities (as transformers' greedy
    ``generate`` chooses), over the answer tokens under "answer-mask". ``forward_calls`` counts the
    tokens written, as ``generate`` reports them.
    """
    started = time.monotonic()
    if deadline_passed(deadline):
        return SearchResult([], capped=DEADLINE_BEFORE_START)
    choice = space if space.probabilities == "answer-mask" else AnswerSpace(
        tuple(range(engine.vocab_size)), space.eos_id, space.max_length, "full")
    allowed = np.zeros(engine.vocab_size, dtype=bool)
    allowed[list(space.allowed_ids)] = True
    prompt_length = len(prompt_ids)
    engine.start(1, prompt_length + space.max_length, choice)
    tokens, nll, stopped = [], 0.0, False
    try:
        increments = engine.prefill(0, [int(t) for t in prompt_ids], prompt_length)[-1]
        while True:
            token = int(np.argmin(increments))  # the first of the most probable, as torch's argmax
            tokens.append(token)
            nll += float(increments[token]) if allowed[token] else float("inf")
            if token == space.eos_id or len(tokens) >= space.max_length:
                break
            if deadline_passed(deadline):
                stopped = True
                break
            increments = engine.step([token], [prompt_length + len(tokens) - 1])[0]
    finally:
        engine.release()
    completions, dropped = [], {}
    if token == space.eos_id:
        completions.append(Completion(tuple(tokens), nll))
    else:
        dropped = {"stopped by the deadline" if stopped else "no eos within the length limit": 1}
    return SearchResult(completions, forward_calls=len(tokens), tokens_processed=prompt_length + len(tokens),
                        seconds=time.monotonic() - started,
                        capped="deadline reached during generation" if stopped else None, dropped=dropped)


def _deadline_criterion(deadline: float):
    """A stopping criterion for ``generate`` that ends every sequence once ``deadline`` has passed."""
    import torch
    from transformers import StoppingCriteria

    class Deadline(StoppingCriteria):
        fired = False

        def __call__(self, input_ids, scores, **kwargs):
            passed = deadline_passed(deadline)
            self.fired = self.fired or passed
            return torch.full((input_ids.shape[0],), passed, dtype=torch.bool, device=input_ids.device)

    return Deadline()


def _generate_baseline(engine: DecodeEngine, prompt_ids, space: AnswerSpace, settings: SamplerSettings, seed: int,
                       deadline: float | None = None) -> SearchResult:
    """Stochastic sampling or beam search through transformers' ``generate`` (reference-only), scored by the engine."""
    import torch
    from transformers import LogitsProcessorList, StoppingCriteriaList

    started = time.monotonic()
    if deadline_passed(deadline):
        return SearchResult([], capped=DEADLINE_BEFORE_START)
    model = engine.model
    device = next(model.parameters()).device
    prompt = torch.tensor([[int(t) for t in prompt_ids]], dtype=torch.long, device=device)
    restrict = [_AllowedTokens(space)] if space.probabilities == "answer-mask" else []
    arguments = dict(max_new_tokens=space.max_length, eos_token_id=space.eos_id, pad_token_id=space.eos_id,
                     logits_processor=LogitsProcessorList(restrict), use_cache=True,
                     top_k=None, top_p=None, min_p=None, typical_p=None, epsilon_cutoff=None, eta_cutoff=None,
                     repetition_penalty=None, no_repeat_ngram_size=None)
    stop = _deadline_criterion(deadline) if deadline is not None else None
    if stop is not None:
        arguments["stopping_criteria"] = StoppingCriteriaList([stop])
    if settings.kind == "sample":
        arguments.update(do_sample=True, num_beams=1, temperature=settings.temperature,
                         num_return_sequences=settings.count)
    else:
        arguments.update(do_sample=False, num_beams=settings.count, num_return_sequences=settings.count,
                         length_penalty=0.0, early_stopping=True, temperature=None)
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        torch.manual_seed(seed)
        sequences = model.generate(prompt, **arguments)
    answers, dropped = [], Counter()
    stopped = stop is not None and stop.fired
    for row in sequences[:, prompt.shape[1]:].tolist():
        if space.eos_id in row:
            answers.append(tuple(row[: row.index(space.eos_id) + 1]))
        else:
            dropped["stopped by the deadline" if stopped else "no eos within the length limit"] += 1
    unique = list(dict.fromkeys(answers))
    nlls = engine.score([prompt_ids], [unique], space)[0] if unique else []
    completions = [Completion(answer, float(nll)) for answer, nll in zip(unique, nlls)]
    generated = int(sequences.shape[1] - prompt.shape[1])
    capped = "deadline reached during generation" if dropped["stopped by the deadline"] else None
    return SearchResult(completions, forward_calls=generated, tokens_processed=prompt.shape[1] + generated,
                        seconds=time.monotonic() - started, capped=capped, dropped=dict(dropped))
