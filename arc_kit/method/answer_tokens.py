"""One answer, token by token: how sure the model was of each token it wrote, and what it would have written instead.

``answer_tokens`` feeds a prompt and an answer through an engine once (``prefill``, as a search starts a
lane) and keeps, for every token of the answer, its probability and the likeliest other token there,
measured as the search measures them (the ``AnswerSpace``). The sum of the answer's NLLs is the NLL the
engine's scoring gives it (the tests hold it to one full forward per answer). ``AnswerTokens`` shows itself
in Jupyter as the answer's text, each token shaded by its probability (the exact numbers in tooltips), and
gives them as a table (``table``). For looking at a model's answers; the method never calls it.

Knows an engine's lanes and token ids; knows nothing of tasks, augmentations or runs.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from arc_kit.data.pictures import FONT
from arc_kit.method.answers import AnswerSpace
from arc_kit.text import TaskEncoder


@dataclass(frozen=True)
class AnswerTokens:
    """An answer's tokens (as text), the NLL of each, and the likeliest other token at each place and its NLL."""

    texts: tuple[str, ...]
    nlls: tuple[float, ...]
    other_texts: tuple[str, ...]
    other_nlls: tuple[float, ...]

    @property
    def nll(self) -> float:
        """The whole answer's NLL (nats): the sum of its tokens'."""
        return float(sum(self.nlls))

    def table(self):
        """One row per token: its text, probability and NLL, the likeliest other token and its probability."""
        import pandas as pd

        return pd.DataFrame({"token": self.texts, "probability": np.exp(-np.array(self.nlls)),
                             "nll": self.nlls, "likeliest other": self.other_texts,
                             "its probability": np.exp(-np.array(self.other_nlls))})

    def _repr_html_(self) -> str:
        spans = []
        for text, nll, other, other_nll in zip(self.texts, self.nlls, self.other_texts, self.other_nlls):
            probability = math.exp(-nll)
            tip = f"p = {probability:.3g} (NLL {nll:.3f}); likeliest other: {other!r}, p = {math.exp(-other_nll):.3g}"
            shade = f"rgba(207,34,46,{min(0.85, 1 - probability):.2f})"  # the less sure, the redder
            shown = "⏎" if text == "\n" else text.replace("\n", "⏎")
            spans.append(f'<span title="{html.escape(tip)}" style="background:{shade};padding:1px 2px;margin:1px;'
                         f'border-radius:2px">{html.escape(shown)}</span>' + ("<br>" if "\n" in text else ""))
        least = min(self.nlls, default=0.0)
        worst = max(self.nlls, default=0.0)
        return (f'<div style="{FONT}"><div style="font-family:monospace;font-size:14px;line-height:1.7">'
                f'{"".join(spans)}</div><div style="color:#444">{len(self.nlls)} tokens, the answer\'s probability '
                f'{math.exp(-self.nll):.3g} (NLL {self.nll:.3f} nats); most sure token p = {math.exp(-least):.3g}, '
                f'least sure p = {math.exp(-worst):.3g} (white: sure, red: unsure; hover for the numbers)'
                '</div></div>')


def answer_tokens(engine, encoder: TaskEncoder, prompt_ids: Sequence[int], answer_ids: Sequence[int],
                  space: AnswerSpace) -> AnswerTokens:
    """The answer's tokens after the prompt, with their NLLs and the likeliest others (module docstring)."""
    prompt, answer = [int(token) for token in prompt_ids], [int(token) for token in answer_ids]
    engine.start(1, len(prompt) + len(answer), space)
    try:
        rows = engine.prefill(0, prompt + answer[:-1], logits_from=len(prompt))  # row j: the NLLs before answer[j]
    finally:
        engine.release()
    nlls = [float(rows[index, token]) for index, token in enumerate(answer)]
    others = []
    for index, token in enumerate(answer):
        row = np.array(rows[index], dtype=float)
        row[token] = math.inf
        others.append(int(np.argmin(row)))
    return AnswerTokens(tuple(encoder.text([token]) for token in answer), tuple(nlls),
                        tuple(encoder.text([token]) for token in others),
                        tuple(float(rows[index, token]) for index, token in enumerate(others)))
