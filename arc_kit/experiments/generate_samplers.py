"""The paper's Table 2 samplers that the method does not use: stochastic sampling and beam search, through transformers.

``generated_candidates(solver, train, test_input, augmentations, sampler, rng, task_id)`` runs
transformers' ``generate`` on the solver's model under each augmentation (``sampler.kind``
"sample": ``sampler.count`` draws at ``sampler.temperature``, from a ``torch`` generator seeded from
``rng``, the global generator left as it was; "beam": ``sampler.count`` beams, no length penalty),
over the whole vocabulary under the full softmax or over the answer tokens under "answer-mask", as
the solver's space says. Answers that never reach eos are dropped and counted; the others are
measured by the solver's engine (``Engine.score``), as every other NLL is, then decoded, mapped back
and merged as the solver merges a search's (``Solver.merge``).

Knows the solver's interface and transformers' ``generate``; the method knows nothing of these samplers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from arc_kit.data.augmentation import Augmentation
from arc_kit.data.tasks import Pair
from arc_kit.method.answers import AnswerSpace, Completion, SearchResult
from arc_kit.method.records import SearchStats
from arc_kit.method.solver import Solver
from arc_kit.settings import SamplerSettings

GENERATE_KINDS = ("sample", "beam")


def generate(model, engine, prompt_ids: Sequence[int], space: AnswerSpace, sampler: SamplerSettings,
             seed: int) -> SearchResult:
    """Answers to one prompt from ``model``'s ``generate`` (module docstring), their NLLs ``engine``'s scoring."""
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList

    device = next(model.parameters()).device
    prompt = torch.tensor([[int(t) for t in prompt_ids]], dtype=torch.long, device=device)

    class AnswerTokensOnly(LogitsProcessor):  # every token outside the answer alphabet gets -inf
        def __call__(self, input_ids, scores):
            return scores.masked_fill(~space.mask(scores.shape[-1], scores.device), float("-inf"))

    restrict = [AnswerTokensOnly()] if space.probabilities == "answer-mask" else []
    arguments = dict(max_new_tokens=space.max_length, eos_token_id=space.eos_id, pad_token_id=space.eos_id,
                     logits_processor=LogitsProcessorList(restrict), use_cache=True, num_return_sequences=sampler.count,
                     top_k=None, top_p=None, min_p=None, typical_p=None, epsilon_cutoff=None, eta_cutoff=None,
                     repetition_penalty=None, no_repeat_ngram_size=None)
    if sampler.kind == "sample":
        arguments.update(do_sample=True, num_beams=1, temperature=sampler.temperature)
    else:
        arguments.update(do_sample=False, num_beams=sampler.count, length_penalty=0.0, early_stopping=True,
                         temperature=None)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.no_grad():
        torch.manual_seed(seed)
        sequences = model.generate(prompt, **arguments)
    answers, dropped = [], Counter()
    for row in sequences[:, prompt.shape[1]:].tolist():
        if space.eos_id in row:
            answers.append(tuple(row[: row.index(space.eos_id) + 1]))
        else:
            dropped["no eos within the length limit"] += 1
    unique = list(dict.fromkeys(answers))
    nlls = engine.score([prompt_ids], [unique], space)[0] if unique else []
    generated = int(sequences.shape[1] - prompt.shape[1])
    return SearchResult([Completion(answer, float(nll)) for answer, nll in zip(unique, nlls)],
                        forward_calls=generated, tokens_processed=prompt.shape[1] + generated, dropped=dict(dropped))


def generated_candidates(solver: Solver, train: Sequence[Pair], test_input: np.ndarray,
                         augmentations: Sequence[Augmentation], sampler: SamplerSettings, rng: np.random.Generator,
                         task_id: str = ""):
    """(candidates, stats) of ``sampler`` under each augmentation, as ``Solver.sample`` returns a search's."""
    if sampler.kind not in GENERATE_KINDS:
        raise ValueError(f"transformers' generate samples by {' or '.join(GENERATE_KINDS)}, not {sampler.kind!r}")
    merged, stats = {}, SearchStats()
    for augmentation in augmentations:
        prompt = solver.encoder.encode_prompt(augmentation.apply_pairs(train), augmentation.apply_grid(test_input),
                                              max_len=solver.settings.max_len, task_id=task_id,
                                              log_drops=augmentation is augmentations[0])
        stats.prompt_tokens.append(len(prompt))
        stats.dropped_train_pairs += len(prompt.dropped)
        found = generate(solver.model, solver.engine(), prompt.ids, solver.space, sampler, int(rng.integers(2**31)))
        solver.merge(found, augmentation, merged, stats)
    return sorted(merged.values(), key=lambda c: c.best_generation_nll), stats
