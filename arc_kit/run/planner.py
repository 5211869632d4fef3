"""The time budget: estimate each task's cost, order the work, and degrade gracefully near the deadline.

A task's cost is estimated from its token counts, in three parts that the solver times separately:
test-time training (steps x tokens of a leave-one-out sequence), generation (augmentations x
(prompt + expected answer tokens)) and scoring (augmentations x prompt tokens). The first estimates
come from guessed speeds (``expectations``: the model's size against the device's floors, times ratios
measured on real runs; ``Speeds.guess`` says which); each finished task refines them (``done``; after
the first, the worker pool prices the queue again: ``calibrate``).

Before each task the planner picks the first rung of a ladder of cheaper settings (fewer TTT steps,
fewer augmentations, a higher DFS threshold, no TTT and greedy) at which everything left is
estimated to fit before the deadline (shared by ``workers`` processes); past the last rung a task
gets fallback answers only, so a complete, valid submission exists at the deadline. It also sets
each task's caps (``budget``), the middle of the chain of time limits (docs/architecture.md, "Time"): the
task's deadline, its share of the time left by its share of the work left, and its searches' share of
that (generation's against scoring's), from which the solver derives each search's deadline. Tasks run cheapest first
in one process, so that a short budget solves as many as it can; a queue shared by several workers
runs the longest first, so that the workers end together; tasks of the same cost (or not priced: sizes of
zero) run in the order given. This module knows the solver's settings
and records, not models or processes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from arc_kit import codec
from arc_kit.data.tasks import Task, TaskSet
from arc_kit.method.records import FALLBACK_RUNG, TaskRecord
from arc_kit.settings import DEFAULT_TOKEN_BUDGET, SolveSettings, ladder
from arc_kit.text import TaskEncoder

FALLBACK = FALLBACK_RUNG  # the rung beyond the ladder: no model work, fallback answers


@dataclass(frozen=True)
class TaskSize:
    """Token counts that drive a task's cost."""

    task_id: str
    training_tokens: int  # one leave-one-out sequence of the train pairs
    prompt_tokens: int  # all test inputs' prompts together
    answer_tokens: int  # the expected answer lengths (test input sizes as a guess)
    train_pairs: int
    tests: int = 1  # test inputs: each gets its own searches


def measure(task: Task, encoder: TaskEncoder, max_len: int = DEFAULT_TOKEN_BUDGET) -> TaskSize:
    """Token counts of a task under the encoder (the budget applied as the solver would)."""
    training = 0
    if len(task.train) >= 2:
        training = min(max_len, sum(encoder.pair_tokens(pair) for pair in task.train))
    prompt = answers = 0
    budget = min(max_len, 10**7)
    for test_input in task.test_inputs:
        try:
            prompt += len(encoder.encode_prompt(task.train, test_input, max_len=budget, log_drops=False))
        except ValueError:
            prompt += budget
        answers += len(encoder.encode_answer(test_input))
    return TaskSize(task.id, training, prompt, answers, len(task.train), max(1, len(task.test_inputs)))


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


PARTS = (("training", "ttt"), ("generation", "generation"), ("scoring", "scoring"))  # (speed, record timing)


@dataclass
class Speeds:
    """Seconds per unit of each part, refined from measured tasks (per part, the mean over the tasks it ran on)."""

    training: float = 2e-5  # per token of a training step (forward and backward)
    generation: float = 5e-3  # per decoded (or explored) answer token; prompt tokens count PROMPT_TOKEN_WEIGHT
    scoring: float = 1e-5  # per prompt token of a scoring pass (the answers ride on its cache)
    measured_tasks: int = 0
    measured_parts: dict[str, int] = field(default_factory=dict)  # per part, the tasks that measured it
    guess: str = ""  # where the speeds of the parts not measured come from ("": the fixed values above)

    def update(self, size: TaskSize, settings: SolveSettings, timings: Mapping[str, float]) -> None:
        """Fold one finished task's timings in (a part that did not run is left alone, and so is its count)."""
        units = work_units(size, settings)
        for part, timing in PARTS:
            if units[part] and _sane_seconds(timings.get(timing)):  # a damaged record's -5 or 1e300 s: left out
                count = self.measured_parts.get(part, 0) + 1
                current = getattr(self, part)
                setattr(self, part, current + (timings[timing] / units[part] - current) / count)
                self.measured_parts[part] = count
        self.measured_tasks += 1

    def seconds(self, size: TaskSize, settings: SolveSettings) -> float:
        units = work_units(size, settings)
        return sum(getattr(self, part) * units[part] for part, _ in PARTS)

    def to_json(self) -> dict:
        return codec.to_json(self)

    def sources(self) -> list[str]:
        """Which parts' speeds were measured (on how many tasks) and which guessed (and from what), a line each."""
        measured = [f"{part} on {self.measured_parts[part]} task(s)" for part, _ in PARTS
                    if self.measured_parts.get(part)]
        guessed = [part for part, _ in PARTS if not self.measured_parts.get(part)]
        return ([f"measured: {', '.join(measured)}"] if measured else []) + \
            ([f"guessed: {', '.join(guessed)}, for {self.guess or 'the fixed assumption'}"] if guessed else [])

    @classmethod
    def from_json(cls, data: Any) -> Speeds:
        """The inverse of ``to_json`` (``codec.from_json``: ValueError in one line for what is not of its kind); what
        is missing, and a part's speed that is no positive finite number (a damaged file's), takes the assumed value."""
        speeds, assumed = codec.from_json(cls, data, "speeds"), cls()
        for part, _ in PARTS:
            if not 0 < getattr(speeds, part) < math.inf:
                setattr(speeds, part, getattr(assumed, part))
        return speeds


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


@dataclass(frozen=True)
class TaskBudget:
    """The caps of one task: its ``deadline`` (seconds since the epoch), and the share of its time left after
    test-time training that its searches may take (``method.solver.search_deadline`` divides it among them)."""

    deadline: float
    search_share: float


class Planner:
    """Decides, task by task, which rung of the ladder the time left allows, and the task's caps.

    ``workers`` processes share the tasks left, so everything fits when their estimate divided by
    ``workers`` fits in the time left (and the task itself fits on its own).
    """

    def __init__(self, sizes: Sequence[TaskSize], settings: SolveSettings, deadline: float,
                 speeds: Speeds | None = None, clock=time.time, *, workers: int = 1, longest_first: bool = False):
        self.sizes = {size.task_id: size for size in sizes}
        self.rungs = ladder(settings)
        self.deadline, self.clock = deadline, clock
        self.workers = max(1, workers)
        self.longest_first = longest_first
        self.position, self.remaining = {}, list(self.sizes)  # the tasks still to run, in the order they run
        self.calibrate(speeds or Speeds())  # sets self.speeds

    def calibrate(self, speeds: Speeds) -> None:
        """Price everything with ``speeds`` (a measurement on this machine) from now on, and reorder the queue."""
        self.speeds = speeds
        sign = -1 if self.longest_first else 1
        for index, (task_id, size) in enumerate(self.sizes.items()):  # a tie in the order given (tasks not priced)
            self.position[task_id] = (sign * speeds.seconds(size, self.rungs[0]), index)
        self.remaining.sort(key=self.position.__getitem__)

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
            if (own + self.estimate(rest, rung)) / self.workers <= left:
                return rung
        # Not everything fits: spend on this task what the cheapest rung needs, if that fits at all.
        cheapest = len(self.rungs) - 1
        return cheapest if self.speeds.seconds(self.sizes[task_id], self.rungs[cheapest]) <= left else FALLBACK

    def budget(self, task_id: str, rung: int) -> TaskBudget:
        """The caps of ``task_id`` at ``rung``, starting now: the time left to the deadline shared among the work
        left (this task's estimate against the estimate of everything left, shared by the workers), and generation's
        share of the task's generation and scoring. Only the estimates' ratios count, so a guessed speed off by any
        factor gives the same caps."""
        settings, size = self.rungs[rung], self.sizes[task_id]
        own = self.speeds.seconds(size, settings)
        rest = self.estimate([i for i in self.remaining if i != task_id], rung)
        left, now = max(0.0, self.seconds_left()), self.clock()
        share = min(1.0, self.workers * own / (own + rest)) if own + rest > 0 else 1.0
        units = work_units(size, settings)
        generation, scoring = self.speeds.generation * units["generation"], self.speeds.scoring * units["scoring"]
        search_share = generation / (generation + scoring) if generation + scoring > 0 else 1.0
        return TaskBudget(now + left * share, search_share)

    def start(self, task_id: str) -> None:
        """``task_id`` is running (in a worker): no longer counted among the tasks left."""
        if task_id in self.remaining:
            self.remaining.remove(task_id)

    def requeue(self, task_id: str) -> None:
        """Put a started task back in its place in the order (its worker died)."""
        if task_id not in self.remaining:
            self.remaining.append(task_id)
            self.remaining.sort(key=self.position.__getitem__)

    def done(self, task_id: str, rung: int, timings: Mapping[str, float] | None) -> None:
        self.start(task_id)
        if timings and rung != FALLBACK:
            self.speeds.update(self.sizes[task_id], self.rungs[rung], timings)

    def seconds_left(self) -> float:
        return self.deadline - self.clock()


def hours(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "inf"
    return f"{int(seconds // 3600)}:{int(seconds % 3600 // 60):02d}:{int(seconds % 60):02d}"


MAX_TASK_SECONDS = 31_536_000.0  # a year: no task's timing is longer (a record saying more is damaged)


def _sane_seconds(value) -> bool:
    """True for a timing a task can have taken: a positive, finite number of seconds, at most ``MAX_TASK_SECONDS``."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= MAX_TASK_SECONDS


def speeds_from_records(records: Mapping[str, TaskRecord], tasks: TaskSet, encoder: TaskEncoder,
                        settings: SolveSettings, guessed: Speeds | None = None) -> Speeds:
    """Speeds measured by a finished run (its records and the settings it ran with); a part no record measured
    keeps ``guessed``'s speed (default: the fixed assumption)."""
    rungs = ladder(settings)
    speeds = replace(guessed, measured_tasks=0, measured_parts={}) if guessed is not None else Speeds()
    for task_id, record in records.items():
        if record.failed or not 0 <= record.rung < len(rungs) or task_id not in tasks:
            continue
        size = measure(tasks[task_id], encoder, settings.max_len or DEFAULT_TOKEN_BUDGET)
        speeds.update(size, rungs[record.rung], record.timings)
    return speeds

