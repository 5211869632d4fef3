"""The drafts benchmark (``arc-kit bench --which drafts``): the speculative DFS against one token per step.

Each test input of the given tasks (the bench command gives the 30 shortest by prompt tokens) is
searched under its inference augmentations (``Solver.views``) by the solver's candidate generation as a
run makes it (``Solver.sample``), once for each setting of ``SamplerSettings.drafts`` (at each cap of
draft tokens asked for: a setting's name is then ``all@15``), in turns (which goes first rotates by
test input, so that none always finds the machine's caches warm). The engine's steps, the wall time
and the draft tokens fed and followed are summed per setting, and every setting's candidates (their
grids, and their NLL under each augmentation, to 1e-4) are compared with those of "none". The last
line is ``auto: N.NNx fewer steps, M.MMx wall`` for "auto" (else the last setting) against "none"
(the wall figure is the speed-up: below 1, slower).

Its loop (``compare_searches``) also holds the engine against transformers' forward
(``engine_bench.engine_agreement``). Knows the solver's interface and the settings; knows nothing of
how drafts are made or walked.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from arc_kit.data.grids import grid_key
from arc_kit.data.tasks import Task
from arc_kit.method.solver import Solver
from arc_kit.settings import DRAFT_SOURCES, SamplerSettings, SolveSettings
from arc_kit.text import TaskEncoder

NLL_TOLERANCE = 1e-4


@dataclass
class _Totals:
    steps: int = 0
    seconds: float = 0.0
    fed: int = 0
    accepted: int = 0
    candidates: int = 0
    differing: list[str] = field(default_factory=list)  # test inputs whose candidates differ from the reference's
    largest: float = 0.0  # the largest NLL difference from the reference on the same candidates


@dataclass
class DraftsBench:
    """What the benchmark measured, per setting of the drafts (its name: the mode, and ``@cap`` beside others)."""

    totals: dict[str, _Totals]
    inputs: int
    note: str

    def lines(self) -> list[str]:
        plain = self.totals["none"]
        lines = [f"drafts bench: {self.inputs} test inputs, {self.note}"]
        for name, total in self.totals.items():
            share = f"{total.accepted / total.fed:.0%} of {total.fed} draft tokens followed" if total.fed else \
                "no drafts"
            same = "" if name == "none" else ("; same candidates, largest NLL difference "
                                              f"{total.largest:.1e}" if not total.differing else
                                              f"; candidates differ on {len(total.differing)} test input(s): "
                                              f"{', '.join(total.differing[:3])}")
            lines.append(f"  {name:<7} {total.steps:8d} engine steps {total.seconds:9.1f} s  {share}{same}")
        name = "auto" if "auto" in self.totals else list(self.totals)[-1]
        best = self.totals[name]
        lines.append(f"{name}: {plain.steps / max(best.steps, 1):.2f}x fewer steps, "
                     f"{plain.seconds / best.seconds if best.seconds else float('nan'):.2f}x wall")
        return lines


def candidate_difference(found: dict, plain: dict) -> float | None:
    """The largest NLL difference between two searches' candidates (grid key -> NLL per augmentation), or None
    when they found different grids (or the same grids under different augmentations)."""
    if found.keys() != plain.keys() or any(found[key].keys() != plain[key].keys() for key in plain):
        return None
    return max((abs(found[key][view] - nll) for key, nlls in plain.items() for view, nll in nlls.items()), default=0.0)


def compare_searches(tasks: Sequence[Task], searches: dict[str, tuple[Solver, SamplerSettings]], reference: str,
                     tolerance: float = NLL_TOLERANCE) -> Iterator[dict[str, _Totals]]:
    """Every test input of ``tasks`` searched by each of ``searches`` (a solver and its sampler) under the views the
    first solver draws, in turns (which goes first rotating by test input); each search's figures summed, and its
    candidates compared with ``reference``'s (differing: other grids, or NLLs more than ``tolerance`` apart). Yields
    the totals after each test input."""
    totals = {name: _Totals() for name in searches}
    names, inputs = list(searches), 0
    first = next(iter(searches.values()))[0]
    for task in tasks:
        for index, test_input in enumerate(task.test_inputs):
            views, _ = first.views(task, index)
            found = {}
            for name in names[inputs % len(names):] + names[:inputs % len(names)]:
                solver, sampler = searches[name]
                started = time.perf_counter()
                candidates, stats = solver.sample(solver.model, task.train, test_input, views, sampler,
                                                  task_id=task.id)
                total = totals[name]
                total.seconds += time.perf_counter() - started
                total.steps += stats.engine_steps
                total.fed += stats.draft_tokens
                total.accepted += stats.draft_accepted
                found[name] = {grid_key(c.grid): c.generation_nlls for c in candidates}
                total.candidates += len(found[name])
            for name in names:
                largest = candidate_difference(found[name], found[reference])
                if largest is not None:
                    totals[name].largest = max(totals[name].largest, largest)
                if largest is None or largest > tolerance:
                    totals[name].differing.append(f"{task.id}[{index}]")
            inputs += 1
            yield totals


def bench_drafts(model, encoder: TaskEncoder, tasks: Sequence[Task], *, threshold: float, augmentations: int,
                 probabilities: str = "full", modes: Sequence[str] = DRAFT_SOURCES,
                 seed: int = 0, draft_tokens: int | Sequence[int] = SamplerSettings().draft_tokens,
                 progress: Callable[[DraftsBench], None] | None = None) -> DraftsBench:
    """Every test input of ``tasks`` under ``augmentations`` views, searched with each setting in ``modes`` at each
    cap in ``draft_tokens`` ("none" once); ``progress`` is given the figures so far after each test input."""
    if "none" not in modes:
        raise ValueError("the drafts benchmark compares with 'none': it must be among the modes")
    caps = [draft_tokens] if isinstance(draft_tokens, int) else list(draft_tokens)
    settings = {(mode if mode == "none" or len(caps) == 1 else f"{mode}@{cap}"): SamplerSettings(
        "dfs", threshold=threshold, drafts=mode, draft_tokens=cap) for cap in caps for mode in modes}
    solver = Solver(model, encoder, SolveSettings(test_time_training=False, probabilities=probabilities,
                                                  inference_augmentations=augmentations, seed=seed))
    note = (f"{len(tasks)} tasks x {augmentations} augmentations, DFS T={threshold:g}, on the {solver.engine().kind}, "
            f"at most {' or '.join(map(str, caps))} draft tokens per step")
    result = DraftsBench({name: _Totals() for name in settings}, 0, note)
    for totals in compare_searches(tasks, {name: (solver, sampler) for name, sampler in settings.items()}, "none"):
        result.totals, result.inputs = totals, result.inputs + 1
        if progress is not None:
            progress(result)
    return result
