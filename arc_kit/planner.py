"""The time budget: estimate each task's cost, order the work, and degrade gracefully near the deadline.

A task's cost is estimated from its token counts, in three parts that the solver times separately:
test-time training (steps x tokens of a leave-one-out sequence), generation (augmentations x
(prompt + expected answer tokens)) and scoring (augmentations x prompt tokens). Until tasks have
run, assumed speeds give the first estimates; each finished task's measured timings refine them.

Before each task the planner picks the first rung of a ladder of cheaper settings (fewer TTT steps,
fewer augmentations, a higher DFS threshold, no TTT and greedy) at which everything left is
estimated to fit before the deadline; past the last rung a task gets fallback answers only, so a
complete, valid submission exists at the deadline. Tasks run cheapest first, so that a short budget
solves as many as it can. This module knows the solver's settings and records, not models.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from arc_kit.records import FALLBACK_RUNG, TaskRecord
from arc_kit.settings import SolveSettings, ladder
from arc_kit.tasks import Task, TaskSet
from arc_kit.text_format import TaskEncoder

FALLBACK = FALLBACK_RUNG  # the rung beyond the ladder: no model work, fallback answers


@dataclass(frozen=True)
class TaskSize:
    """Token counts that drive a task's cost."""

    task_id: str
    training_tokens: int  # one leave-one-out sequence of the train pairs
    prompt_tokens: int  # all test inputs' prompts together
    answer_tokens: int  # the expected answer lengths (test input sizes as a guess)
    train_pairs: int


def measure(task: Task, encoder: TaskEncoder, max_len: int = 8192) -> TaskSize:
    """Token counts of a task under the encoder (the budget applied as the solver would)."""
    training = 0
    if len(task.train) >= 2:
        training = min(max_len, sum(encoder.pair_tokens(pair) for pair in task.train))
    prompt = answers = 0
    for test_input in task.test_inputs:
        budget = min(max_len, 10**7)
        try:
            prompt += len(encoder.encode_prompt(task.train, test_input, max_len=budget, log_drops=False))
        except ValueError:
            prompt += budget
        answers += len(encoder.encode_answer(test_input))
    return TaskSize(task.id, training, prompt, answers, len(task.train))


def shortest_tasks(tasks: TaskSet, encoder: TaskEncoder, count: int) -> TaskSet:
    """The ``count`` tasks with the fewest prompt plus expected answer tokens (ties by id), in that order.

    Only what a solver may see counts: the train pairs and test inputs (answers guessed from the
    inputs' sizes), never a test output.
    """
    def tokens(task: Task) -> tuple[int, str]:
        size = measure(task, encoder, 10**7)  # whole prompts: no pair dropped to fit
        return size.prompt_tokens + size.answer_tokens, task.id

    chosen = sorted(tasks.tasks(), key=tokens)[:count]
    return tasks.select([task.id for task in chosen])


PROMPT_TOKEN_WEIGHT = 0.05  # a prompt token, processed in parallel, costs about this share of a decoded one


@dataclass
class Speeds:
    """Seconds per unit of each part, refined from measured tasks (running means)."""

    training: float = 2e-5  # per token of a training step (forward and backward)
    generation: float = 5e-3  # per decoded (or explored) answer token; prompt tokens count PROMPT_TOKEN_WEIGHT
    scoring: float = 1e-5  # per prompt token of a scoring pass (the answers ride on its cache)
    measured_tasks: int = 0

    def update(self, size: TaskSize, settings: SolveSettings, timings: Mapping[str, float]) -> None:
        """Fold one finished task's timings in (a part that did not run is left alone)."""
        weight = 1.0 / (self.measured_tasks + 1)
        units = work_units(size, settings)
        for part, timing in (("training", "ttt"), ("generation", "generation"), ("scoring", "scoring")):
            if units[part] and timings.get(timing):
                current = getattr(self, part)
                setattr(self, part, current + weight * (timings[timing] / units[part] - current))
        self.measured_tasks += 1

    def seconds(self, size: TaskSize, settings: SolveSettings) -> float:
        units = work_units(size, settings)
        return self.training * units["training"] + self.generation * units["generation"] + \
            self.scoring * units["scoring"]


def work_units(size: TaskSize, settings: SolveSettings) -> dict[str, float]:
    training = settings.ttt.steps * min(size.training_tokens, settings.max_len or size.training_tokens) \
        if settings.test_time_training and size.train_pairs >= 2 else 0
    explored = 1.0
    if settings.sampler.kind == "dfs":
        # relative to greedy, as the paper measured it (Table 2: T=20% 0.63x, 9% 1.0x, 0.5% 8.5x)
        explored = (0.09 / settings.sampler.threshold) ** 0.7
    elif settings.sampler.kind in ("sample", "beam"):
        explored = settings.sampler.count
    generation = settings.inference_augmentations * (PROMPT_TOKEN_WEIGHT * size.prompt_tokens
                                                     + explored * size.answer_tokens)
    scoring = settings.scoring_augmentations * size.prompt_tokens if settings.aggregation != "generation" else 0
    return {"training": training, "generation": generation, "scoring": scoring}


class Planner:
    """Decides, task by task, which rung of the ladder the time left allows."""

    def __init__(self, sizes: Sequence[TaskSize], settings: SolveSettings, deadline: float,
                 speeds: Speeds | None = None, clock=time.time):
        self.sizes = {size.task_id: size for size in sizes}
        self.rungs = ladder(settings)
        self.deadline, self.clock = deadline, clock
        self.speeds = speeds or Speeds()
        self.remaining = [size.task_id for size in sorted(sizes, key=lambda s: self.speeds.seconds(s, settings))]

    def order(self) -> list[str]:
        """The tasks still to run, cheapest first."""
        return list(self.remaining)

    def estimate(self, task_ids: Sequence[str], rung: int) -> float:
        return sum(self.speeds.seconds(self.sizes[task_id], self.rungs[rung]) for task_id in task_ids)

    def choose(self, task_id: str) -> int:
        """The rung for ``task_id``: the first at which it and all tasks after it fit; FALLBACK if none."""
        left = self.deadline - self.clock()
        rest = [i for i in self.remaining if i != task_id]
        for rung in range(len(self.rungs)):
            own = self.speeds.seconds(self.sizes[task_id], self.rungs[rung])
            if own > left:
                continue
            if own + self.estimate(rest, rung) <= left:
                return rung
        # Not everything fits: spend on this task what the cheapest rung needs, if that fits at all.
        cheapest = len(self.rungs) - 1
        return cheapest if self.speeds.seconds(self.sizes[task_id], self.rungs[cheapest]) <= left else FALLBACK

    def done(self, task_id: str, rung: int, timings: Mapping[str, float] | None) -> None:
        if task_id in self.remaining:
            self.remaining.remove(task_id)
        if timings and rung != FALLBACK:
            self.speeds.update(self.sizes[task_id], self.rungs[rung], timings)

    def seconds_left(self) -> float:
        return self.deadline - self.clock()


def hours(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "inf"
    return f"{int(seconds // 3600)}:{int(seconds % 3600 // 60):02d}:{int(seconds % 60):02d}"


def speeds_from_records(records: Mapping[str, TaskRecord], tasks: TaskSet, encoder: TaskEncoder,
                        settings: SolveSettings) -> Speeds:
    """Speeds measured by a finished run (its records and the settings it ran with)."""
    rungs = ladder(settings)
    speeds = Speeds()
    for task_id, record in records.items():
        if record.failed or record.rung < 0 or task_id not in tasks:
            continue
        size = measure(tasks[task_id], encoder, settings.max_len or 8192)
        speeds.update(size, rungs[record.rung], record.timings)
    return speeds


def estimate_run(tasks: TaskSet, encoder: TaskEncoder, settings: SolveSettings, speeds: Speeds) -> dict:
    """Seconds the configured settings would take on every task of ``tasks`` at ``speeds``: total and parts."""
    totals = {"training": 0.0, "generation": 0.0, "scoring": 0.0}
    for task in tasks.tasks():
        units = work_units(measure(task, encoder, settings.max_len or 8192), settings)
        for part in totals:
            totals[part] += getattr(speeds, part) * units[part]
    return {**totals, "total": sum(totals.values()), "tasks": len(tasks)}
