"""A task record as HTML: its attempts, candidates and their probabilities under each augmentation, time, search.

``record_html`` draws what ``records.TaskRecord`` holds (``TaskRecord._repr_html_`` in Jupyter; the run report
adds the task's pairs with ``task``): per test input, the attempts (ticked or crossed where the output is
known, "no answer" where there is none), then a table of the candidates, best first by the product of
experts: each one's picture, its probability when it was generated (its best augmentation's), the product
of experts as the geometric mean of its probabilities over the scoring augmentations (the PoE's ranking in
a unit a reader knows: the per-view probability that the product of their probabilities is the power of),
and its probability under each scoring augmentation, named whole (symmetry and colour map). Then the time
spent in training, search and scoring, and what the search did. Probabilities are shown, NLLs in tooltips.

A record here is ``records.TaskRecord`` (a test input's part, ``records.TestResult``), taken as it comes:
``records`` imports this module for ``TaskRecord._repr_html_``. Knows records, candidates, grids and
augmentation keys; knows nothing of models, runs or files.
"""

from __future__ import annotations

import html
import math

import numpy as np

from arc_kit.data.augmentation import Augmentation
from arc_kit.data.grids import grid_key
from arc_kit.data.tasks import Task
from arc_kit.data.pictures import PLAIN, RIGHT, WRONG, Picture, attempt_panels, block, cell_pixels, panel, row
from arc_kit.method.experts import Candidate
from arc_kit.names import shown

SHOWN_CANDIDATES = 12  # candidates a table lists (the rest counted)
FAINTEST = math.log(1e3)  # an NLL this high (a probability of 1 in 1,000) gets no colour in a table's cell


def probability_text(nll: float) -> str:
    """A probability from its NLL, as a reader takes it in: ``42%``, ``4.2%``, ``0.42%``, then ``4e-5``."""
    if not math.isfinite(nll):
        return "0"
    probability = math.exp(-nll)
    if probability >= 0.1:
        return f"{probability:.0%}"
    if probability >= 0.001:
        return f"{100 * probability:.2g}%"
    return f"{probability:.0e}".replace("e-0", "e-")


def geometric_mean_nll(candidate: Candidate) -> float:
    """The product of experts as a mean NLL per scoring view (inf when never scored): exp(-it) is the geometric mean
    of the candidate's probabilities over the views, and it ranks candidates as their product does."""
    return candidate.aggregate("product") / len(candidate.scoring_nlls) if candidate.scoring_nlls else math.inf


def _cell(nll: float, note: str = "") -> str:
    strength = 0.0 if not math.isfinite(nll) else float(np.clip(1 - nll / FAINTEST, 0, 1))
    tip = f"NLL {nll:.3f} nats{note}" if math.isfinite(nll) else f"not measured{note}"
    return (f'<td title="{html.escape(tip)}" style="text-align:right;padding:2px 6px;'
            f'background:rgba(26,127,55,{0.08 + 0.62 * strength:.2f})">{probability_text(nll)}</td>')


def _heading(key: str) -> str:
    """A scoring augmentation's column heading: its symmetry, then its colour map (each colour's new colour)."""
    augmentation = Augmentation.from_key(key)
    colours = "".join(map(str, augmentation.colours))
    return (f'<th title="{html.escape(augmentation.name)}" style="padding:2px 6px;font-weight:500">'
            f'{augmentation.symmetry_name}<br><code style="font-size:10px">{colours}</code></th>')


def ranked_candidates(test) -> list[Candidate]:
    """The candidates of one test input, best first by the product of experts (by generation where none was
    scored), as the solver ranks them with its default aggregation."""
    return sorted(test.candidates, key=lambda c: (geometric_mean_nll(c), c.best_generation_nll))


def candidates_table(test, known: np.ndarray | None = None) -> str:
    """The candidates of one test input (``ranked_candidates``) as a table (the module's docstring)."""
    candidates = ranked_candidates(test)
    if not candidates:
        return ""
    chosen = {grid_key(attempt): number for number, attempt in enumerate(test.attempts, 1)}
    cell = cell_pixels([candidate.grid for candidate in candidates[:SHOWN_CANDIDATES]], longest=60)
    headings = "".join(_heading(key) for key in test.scoring_augmentations)
    views = len(test.scoring_augmentations)
    lines = [f'<tr><th>#</th><th>candidate</th><th title="its probability where the search found it (its most '
             f'probable view)">generated</th><th title="the geometric mean of its probabilities over the {views} '
             f'scoring views: the product of experts, per view">PoE ({views} views)</th>{headings}</tr>']
    for rank, candidate in enumerate(candidates[:SHOWN_CANDIDATES], 1):
        number = chosen.get(grid_key(candidate.grid))
        right = known is not None and np.array_equal(candidate.grid, known)
        label = (f"attempt {number}" if number else "") + (" ✓" if right else "")
        colour = RIGHT if right else (WRONG if number and known is not None else PLAIN)
        found = len(candidate.generation_nlls)
        lines.append(f'<tr><td>{rank}</td><td>{panel(candidate.grid, label, cell, colour=colour)}</td>'
                     + _cell(candidate.best_generation_nll, f", found under {found} augmentation(s)")
                     + _cell(geometric_mean_nll(candidate), f" per view; {candidate.aggregate('product'):.2f} in all")
                     + "".join(_cell(nll) for nll in candidate.scoring_nlls) + "</tr>")
    more = len(candidates) - SHOWN_CANDIDATES
    note = f'<div style="color:#666">and {more} more candidate(s)</div>' if more > 0 else ""
    return (f'<table style="border-collapse:collapse;margin:6px 0">{"".join(lines)}</table>{note}')


def search_text(test) -> str:
    """What one test input's search did, in one line."""
    search = test.search
    parts = [f"{len(test.inference_augmentations)} augmentation(s) searched", f"{search.forward_calls} forward calls",
             f"{search.tokens} tokens", f"{search.answers} answers ({search.not_grids} not grids)",
             f"{len(test.candidates)} candidates"]
    if search.engine_steps:
        parts.append(f"{search.engine_steps} engine steps")
    if search.draft_tokens:
        parts.append(f"drafts followed {search.draft_accepted} of {search.draft_tokens} tokens")
    if search.dropped_train_pairs:
        parts.append(f"{search.dropped_train_pairs} train pair(s) left out of prompts")
    if search.capped:
        parts.append(f"stopped early: {'; '.join(search.capped[:2])}")
    return ", ".join(parts)


def time_text(record) -> str:
    """Where the task's time went, and what test-time training did."""
    timings = record.timings
    parts = [f"{timings.get('total', 0.0):.1f} s in all"] + [
        f"{name} {timings[part]:.1f} s" for part, name in (("ttt", "training"), ("generation", "search"),
                                                           ("scoring", "scoring")) if part in timings]
    ttt = record.ttt
    if ttt is not None and ttt.skipped:
        parts.append(f"no training ({ttt.skipped})")
    elif ttt is not None:
        loss = (f", loss {ttt.first_loss:.3f} → {ttt.last_loss:.3f}" if ttt.first_loss is not None
                and ttt.last_loss is not None else "")
        parts.append(f"training: {ttt.steps} steps{loss}" + (f", stopped: {ttt.stopped}" if ttt.stopped else ""))
    return ", ".join(parts)


def record_html(record, task: Task | None = None, *, heading: bool = True) -> str:
    """The record (module docstring); with ``task``, each test input and its known output beside the attempts.
    ``heading`` False: without the line that names the task and says how it went (a report's section has one)."""
    sections = []
    if record.error or record.skipped:
        sections.append(f'<div style="color:{WRONG}">{"error" if record.error else "skipped"}: '
                        f'{html.escape(record.error or record.skipped)}</div>')
    for index, test in enumerate(record.tests or [None] * (len(task.test) if task is not None else 0)):
        pair = task.test[index] if task is not None and index < len(task.test) else None
        known = pair.output if pair is not None else None
        attempts = test.attempts if test is not None else []
        cell = cell_pixels([*attempts, *([pair.input, pair.output] if pair is not None else [])])
        panels = [panel(pair.input, "test input", cell), panel(known, "output", cell, empty="unknown")] if pair else []
        panels += attempt_panels(attempts, known, cell)
        parts = [row(panels)]
        if test is not None:
            parts += [candidates_table(test, known), f'<div style="color:#444">{html.escape(search_text(test))}</div>']
        sections.append(f'<div style="margin:6px 0"><div style="font-weight:600">test {index}</div>{"".join(parts)}'
                        '</div>')
    sections.append(f'<div style="color:#444">{html.escape(time_text(record))}</div>')
    return block("".join(sections), f"task {shown(record.task_id)}: {verdict_text(record)}" if heading else "")


def verdict_text(record) -> str:
    """right, wrong, 1 of 2 right, no answer, failed, or answered (solutions unknown)."""
    if record.error:
        return "failed"
    if not any(test.attempts for test in record.tests):
        return "no answer"
    if record.correct is None:
        return "answered (solutions unknown)"
    right = sum(record.correct)
    if 0 < right < len(record.correct):
        return f"{right} of {len(record.correct)} right"
    return "right" if right else "wrong"


def show_record(record, task: Task | None = None) -> Picture:
    """The record as Jupyter shows it, with ``task``'s test inputs and known outputs beside the attempts."""
    return Picture(record_html(record, task))
