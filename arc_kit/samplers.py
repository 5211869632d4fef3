"""Candidate generation behind one interface: DFS (the default), greedy, stochastic sampling, beam search.

``generate(model, prompt_ids, space, settings)`` returns a ``SearchResult`` whatever the sampler.
The baselines go through transformers' ``generate``: under the full softmax (``space.probabilities``
"full") over the whole vocabulary, so a completion may hold a token that is no answer token (it
fails to decode, and the solver counts it as not a grid); under "answer-mask" with every other
token masked out. Their answers' NLLs are then measured by ``decoding.score_answers``, the same way
as DFS and the scorer measure them. Answers that never reach eos are dropped and counted. Stochastic sampling
draws from a ``torch.Generator`` state seeded by the caller; the global generator is left as it was.
A ``deadline`` (``time.monotonic()``) bounds every sampler: DFS checks it before each model call, the
baselines through a stopping criterion checked after each generated token (their answers found by
then are measured by one more forward); a search stopped by it says so in ``capped``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

from arc_kit.decoding import AnswerSpace, Completion, SearchResult, deadline_passed, score_answers
from arc_kit.dfs import DEADLINE_BEFORE_START, DfsSettings, dfs_search
from arc_kit.settings import SamplerSettings


class _AllowedTokens:
    """A logits processor for ``generate``: every token outside the answer alphabet gets -inf."""

    def __init__(self, space: AnswerSpace):
        self.space, self.mask = space, None

    def __call__(self, input_ids, scores):
        if self.mask is None or self.mask.device != scores.device:
            self.mask = self.space.mask(scores.shape[-1], scores.device)
        return scores.masked_fill(~self.mask, float("-inf"))


def generate(model, prompt_ids: Sequence[int], space: AnswerSpace, settings: SamplerSettings = SamplerSettings(),
             guess: Sequence[int] | None = None, seed: int = 0, *, deadline: float | None = None) -> SearchResult:
    """Answers to a prompt from the chosen sampler (``guess`` is used by DFS only), found by ``deadline``."""
    if settings.kind == "dfs":
        return dfs_search(model, prompt_ids, space,
                          DfsSettings(settings.threshold, settings.max_forward_calls),
                          guess if settings.use_guess else None, deadline=deadline)
    return _generate_baseline(model, prompt_ids, space, settings, seed, deadline)


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


def _generate_baseline(model, prompt_ids, space: AnswerSpace, settings: SamplerSettings, seed: int,
                       deadline: float | None = None) -> SearchResult:
    import torch
    from transformers import LogitsProcessorList, StoppingCriteriaList

    started = time.monotonic()
    if deadline_passed(deadline):
        return SearchResult([], capped=DEADLINE_BEFORE_START)
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
    if settings.kind == "greedy":
        arguments.update(do_sample=False, num_beams=1, temperature=None)
    elif settings.kind == "sample":
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
    nlls = score_answers(model, prompt_ids, unique, space)
    completions = [Completion(answer, float(nll)) for answer, nll in zip(unique, nlls)]
    generated = int(sequences.shape[1] - prompt.shape[1])
    capped = "deadline reached during generation" if dropped["stopped by the deadline"] else None
    return SearchResult(completions, forward_calls=generated, tokens_processed=prompt.shape[1] + generated,
                        seconds=time.monotonic() - started, capped=capped, dropped=dict(dropped))
