"""The method on one task: test-time training, candidates under m augmentations, product-of-experts selection.

For each task: optional test-time training on its train pairs; for each test input, the sampler
runs under each of m inference augmentations (DFS by default, each search starting from the best
answer found so far); answers are decoded, mapped back to the original frame and merged; the
merged candidates are scored under m' fresh augmentations and the best (``settings.attempts`` of
them: two, or one for top-1) by the aggregation become the attempts. Every NLL is measured as
``settings.probabilities`` says (the full softmax by default), carried by the solver's
``AnswerSpace``. Every random choice comes from a generator seeded by (seed, task id), so a task's
result does not depend on which tasks ran before it, in which process, or whether a run resumed.

A task may be given a ``deadline`` (a ``time.monotonic()`` value), and with it ``search_share``: the share of
the time left after test-time training that its searches may take (the rest is scoring's). Each search's deadline
is its part of that share of the time left when it starts (``search_deadline``: the searches left divide it), so
that no search takes the time of those after it or of scoring. Test-time training stops between steps, a search
stops before its next model call and keeps what it found, a search that would start late finds nothing, and a test
input whose candidates arrive after the deadline is decided by generation NLL (no scoring pass). The record says
which stage the deadline cut short (``deadline_hit``).

Every model call goes through the solver's one decode engine (``engine.make_engine``), built on
first use; after test-time training changes the adapter, and when ``base_model`` turns it off or on
again, the engine re-reads the weights (once per state). ``on_step`` (a callable with no arguments:
a worker's heartbeat) is called by the engine once per model pass.

``Solver.solve_task`` returns a ``records.TaskRecord`` and never raises for one task's failure; where the
task's test outputs are known, the record's ``correct`` says which its attempts got right (nothing else
reads them).
Running a whole set (records on disk, resuming, the submission) is ``run``'s business, not this
module's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import time
import traceback
from collections.abc import Callable, Sequence

import numpy as np

from arc_kit.data.augmentation import Augmentation
from arc_kit.data.grids import grid_key
from arc_kit.data.submission import any_attempt_right
from arc_kit.data.tasks import Pair, Task
from arc_kit.method.answers import AnswerSpace, SearchResult, deadline_passed, release_memory
from arc_kit.method.drafts import draft_source
from arc_kit.method.engine import make_engine
from arc_kit.method.experts import Candidate, select
from arc_kit.method.records import SearchStats, TaskRecord, TestResult, TrainingSummary
from arc_kit.method.search import search
from arc_kit.method.step_costs import DraftOdds
from arc_kit.method.ttt import TestTimeTrainer
from arc_kit.names import encoded, shown
from arc_kit.settings import SamplerSettings, SolveSettings, ladder
from arc_kit.text import NotAGridError, TaskEncoder, TextFormat

logger = logging.getLogger(__name__)


def task_rng(seed: int, task_id: str, purpose: str = "") -> np.random.Generator:
    """A generator that depends only on the run seed, the task id and the purpose."""
    digest = hashlib.sha256(encoded(f"{task_id}/{purpose}")).digest()
    return np.random.default_rng((seed, int.from_bytes(digest[:8], "little")))


class Solver:
    """A loaded model plus the settings of the method; ``solve_task`` runs it on one task.

    One token budget serves prompts, answers and test-time training sequences: an unset
    ``settings.max_len`` becomes the encoder's budget; a set one wins, and the encoder is rebuilt
    with it (the settings are what a run records). So does ``settings.decoding``, how answers are read.
    """

    def __init__(self, model, encoder: TaskEncoder, settings: SolveSettings = SolveSettings(), *,
                 on_step: Callable[[], None] | None = None, engine=None):
        if settings.max_len is None:
            settings = settings.replace(max_len=encoder.max_len)
        text_format = dataclasses.replace(encoder.format, decoding=settings.decoding)
        if settings.max_len != encoder.max_len or text_format != encoder.format:
            encoder = TaskEncoder(encoder.tokenizer, text_format, settings.max_len)
        self.settings, self.encoder, self.on_step = settings, encoder, on_step
        self.space = AnswerSpace.from_encoder(encoder, settings.probabilities)
        self.trainer = (TestTimeTrainer(model, encoder, settings.ttt, keep_background=settings.keep_background)
                        if settings.test_time_training else None)
        self.model = model if self.trainer is None else self.trainer.model
        self._engine = engine  # None: ``engine.make_engine``'s, on first use (given: the GPU check's oracle)
        self._adapter_version = 0  # bumped whenever test-time training changes (or resets) the adapter
        self._adapter_off = False  # inside ``base_model``
        self.draft_odds = DraftOdds()  # how often "auto" drafts were followed, learnt over every search of the solver
        self._engine_state: tuple | None = None  # (adapter version, adapter off) the engine's weights hold

    @classmethod
    def from_loaded(cls, loaded, settings: SolveSettings = SolveSettings(), text_format: TextFormat = TextFormat(),
                    *, on_step: Callable[[], None] | None = None) -> Solver:
        """A solver for a ``loading.LoadedModel``; the token budget is cut to what the model takes."""
        settings = settings.replace(max_len=loaded.token_budget(settings.max_len))
        return cls(loaded.model, loaded.encoder(text_format, settings.max_len), settings, on_step=on_step)

    # -- pieces, also used by the tables ---------------------------------------------------------
    @contextlib.contextmanager
    def base_model(self):
        """The model without the test-time adapter (the model itself when there is none)."""
        with contextlib.nullcontext(self.model) if self.trainer is None else self.trainer.adapter_disabled() as model:
            self._adapter_off = self.trainer is not None
            try:
                yield model
            finally:
                self._adapter_off = False

    def engine(self, model=None):
        """The decode engine for ``model`` (module docstring); another model than the solver's gets an engine of its
        own for this call."""
        if model is not None and model is not self.model:
            return make_engine(model, self.settings.engine_compile, self.on_step)
        state = (self._adapter_version, self._adapter_off)
        if self._engine is None:
            self._engine = make_engine(self.model, self.settings.engine_compile, self.on_step)
        elif state != self._engine_state:
            self._engine.refresh()
        self._engine_state = state
        return self._engine

    def adapt(self, task: Task, settings: SolveSettings | None = None, deadline: float | None = None
              ) -> TrainingSummary:
        """Test-time training on the task's train pairs (a no-op without it); what it did.

        With ``settings.test_time_training`` off the adapter is reset, so the model is the base model.
        No step starts after ``deadline`` (``time.monotonic()``).
        """
        settings = settings or self.settings
        if self.trainer is None:
            return TrainingSummary(skipped="off")
        self._adapter_version += 1  # reset or trained below: the engine re-reads the weights
        if not settings.test_time_training:
            self.trainer.reset()
            return TrainingSummary(skipped="off")
        return self.trainer.train(task.train, task_rng(settings.seed, task.id, "ttt"), steps=settings.ttt.steps,
                                  deadline=deadline)

    def sample(self, model, train: Sequence[Pair], test_input: np.ndarray, augmentations: Sequence[Augmentation],
               sampler: SamplerSettings, task_id: str = "", *, deadline: float | None = None,
               search_share: float | None = None, searches_after: int = 0) -> tuple[list[Candidate], SearchStats]:
        """Search under each augmentation (``search.search``); decode, map back and merge the answers.

        The first augmentation's search runs alone; the others' then run together, as lanes, each
        guided by the first one's best answer (mapped into its frame). Each search gets the draft source
        ``sampler.drafts`` names (``drafts.draft_source``: the candidates so far are among its drafts;
        "auto" learns in ``draft_odds`` how often they are followed). Each of the two stops at its own deadline,
        its part of ``search_share`` of the time left to ``deadline`` (``search_deadline``; ``searches_after``: the
        searches of the test inputs after this one). The stats count the engine's steps and the drafts fed and
        followed.
        """
        engine = self.engine(model)
        merged: dict[bytes, Candidate] = {}
        stats = SearchStats()
        prompts = []
        for augmentation in augmentations:
            prompt = self.encoder.encode_prompt(augmentation.apply_pairs(train), augmentation.apply_grid(test_input),
                                                max_len=self.settings.max_len, task_id=task_id,
                                                log_drops=augmentation is augmentations[0])  # once per input
            stats.prompt_tokens.append(len(prompt))
            stats.dropped_train_pairs += len(prompt.dropped)
            prompts.append(prompt.ids)
        steps_before = engine.steps
        groups = [views for views in (range(1), range(1, len(augmentations))) if views]  # the first view alone, then
        for index, views in enumerate(groups):  # the others as lanes, guided by its best answer
            grids = [c.grid for c in sorted(merged.values(), key=lambda c: c.best_generation_nll)]  # the best first
            chosen = [augmentations[view] for view in views]
            guesses = [self.encoder.encode_answer(a.apply_grid(grids[0])) if grids else None for a in chosen]
            drafts = [draft_source(sampler.drafts, self.encoder, prompts[view], test_input, augmentations[view], grids)
                      for view in views]
            searched = search_deadline(deadline, search_share, len(groups) - index + searches_after)
            results = search(engine, [prompts[view] for view in views], self.space, sampler, guesses, drafts=drafts,
                             deadline=searched, odds=self.draft_odds)
            for augmentation, result in zip(chosen, results):
                self.merge(result, augmentation, merged, stats)
        stats.engine_steps = engine.steps - steps_before
        return sorted(merged.values(), key=lambda c: c.best_generation_nll), stats

    def merge(self, result: SearchResult, augmentation: Augmentation, merged: dict[bytes, Candidate],
               stats: SearchStats) -> None:
        """Count one search in ``stats``; decode its answers, map them back and merge them into ``merged``."""
        stats.forward_calls += result.forward_calls
        stats.tokens += result.tokens_processed
        stats.draft_tokens += result.draft_tokens
        stats.draft_accepted += result.draft_accepted
        if result.capped:
            stats.capped.append(f"{augmentation.key}: {result.capped}")
        for reason, count in result.dropped.items():
            stats.dropped[reason] = stats.dropped.get(reason, 0) + count
        for completion in result.completions:
            stats.answers += 1
            try:
                grid = augmentation.invert_grid(self.encoder.decode_answer(completion.ids))
            except NotAGridError:
                stats.not_grids += 1
                continue
            candidate = merged.setdefault(grid_key(grid), Candidate(grid))
            nll = candidate.generation_nlls.get(augmentation.key, float("inf"))
            candidate.generation_nlls[augmentation.key] = min(nll, completion.nll)

    def score(self, model, train: Sequence[Pair], test_input: np.ndarray, candidates: Sequence[Candidate],
              augmentations: Sequence[Augmentation]) -> None:
        """Fill each candidate's NLL under every scoring augmentation (``augmented_nlls``)."""
        if not candidates:
            return
        table = augmented_nlls(self.engine(model), self.encoder, train, test_input, [c.grid for c in candidates],
                               augmentations, self.space, self.settings.scoring_batch_size, self.settings.max_len)
        for candidate, row in zip(candidates, table):
            candidate.scoring_nlls = [float(v) for v in row]

    def views(self, task: Task, test_index: int, settings: SolveSettings | None = None
              ) -> tuple[list[Augmentation], list[Augmentation]]:
        """The inference and scoring augmentations of one test input, drawn from (seed, task id, test index) alone,
        so runs, resumptions and tables agree."""
        settings = settings or self.settings
        rng = task_rng(settings.seed, task.id, f"test{test_index}")
        return tuple(Augmentation.inference_set(rng, len(task.train), count, keep_background=settings.keep_background)
                     for count in (settings.inference_augmentations, settings.scoring_augmentations))

    # -- the method ------------------------------------------------------------------------------
    def solve_task(self, task: Task, settings: SolveSettings | None = None, rung: int = 0,
                   deadline: float | None = None, search_share: float | None = None) -> TaskRecord:
        """Run the whole method on one task; its record (errors recorded, never raised).

        ``settings`` (a cheaper rung of ``settings.ladder(self.settings)``, say) replaces the solver's
        own for this task; the test-time adapter's shape stays the solver's. ``deadline`` (a
        ``time.monotonic()`` value) bounds the task, and ``search_share`` of its time left its searches (module
        docstring).
        """
        settings = settings or self.settings
        started = time.monotonic()
        record = TaskRecord(task.id, rung=rung)
        outputs = task.test_outputs  # None unless every one is known; only the verdict below reads them
        try:
            task = task.without_solutions()  # nothing below may see a test output
            record.ttt = self.adapt(task, settings, deadline)
            if record.ttt.stopped:
                record.deadline_hit = "test-time training"
            record.timings["ttt"] = round(time.monotonic() - started, 3)
            generation_seconds = scoring_seconds = 0.0
            for test_index, test_input in enumerate(task.test_inputs):
                inference, scoring = self.views(task, test_index, settings)
                moment = time.monotonic()
                later = (len(task.test_inputs) - test_index - 1) * searches_per_input(len(inference))
                candidates, stats = self.sample(self.model, task.train, test_input, inference, settings.sampler,
                                                task_id=task.id, deadline=deadline, search_share=search_share,
                                                searches_after=later)
                generation_seconds += time.monotonic() - moment
                out_of_time = deadline_passed(deadline)
                if out_of_time and record.deadline_hit is None:
                    record.deadline_hit = "generation"
                if settings.aggregation == "generation" or out_of_time:  # out of time: selected by generation NLL
                    scoring = []
                if scoring:
                    moment = time.monotonic()
                    self.score(self.model, task.train, test_input, candidates, scoring)
                    scoring_seconds += time.monotonic() - moment
                chosen = select(candidates, settings.aggregation if scoring else "generation", settings.attempts)
                record.tests.append(TestResult([candidates[i].grid for i in chosen], candidates,
                                               [a.key for a in inference], [a.key for a in scoring], stats))
            record.timings.update(generation=round(generation_seconds, 3), scoring=round(scoring_seconds, 3))
        except Exception as error:  # one task's failure must never stop the run
            record.error = f"{type(error).__name__}: {error}"
            record.traceback = traceback.format_exc(limit=8)
            logger.warning("task %s failed: %s", shown(task.id), record.error)
        record.timings["total"] = round(time.monotonic() - started, 3)
        if outputs is not None:  # a test input with no attempts (the task failed before it) is not right
            attempts = record.attempts + [[]] * (len(outputs) - len(record.attempts))
            record.correct = [any_attempt_right(tried, output) for tried, output in zip(attempts, outputs)]
        return record

    def solve_with_retry(self, task: Task, rung: int = 0, rungs: Sequence[SolveSettings] | None = None,
                         deadline: float | None = None, search_share: float | None = None) -> TaskRecord:
        """``solve_task`` at ``rung``; on failure (out of memory, say) once more two rungs cheaper.

        Both tries share ``deadline`` and ``search_share``; there is no retry once the deadline has passed.
        """
        rungs = list(rungs or ladder(self.settings))
        record = self.solve_task(task, rungs[rung], rung, deadline=deadline, search_share=search_share)
        if record.error is None or deadline_passed(deadline):
            return record
        release_memory()
        cheaper = min(rung + 2, len(rungs) - 1)
        retry = self.solve_task(task, rungs[cheaper], cheaper, deadline=deadline, search_share=search_share)
        retry.retried_after = record.error
        return retry


def searches_per_input(views: int) -> int:
    """Search calls per test input under ``views`` inference views: the first alone, then the rest as lanes."""
    return 2 if views > 1 else 1


def search_deadline(deadline: float | None, search_share: float | None, searches_left: int) -> float | None:
    """A search's deadline (``time.monotonic()``): its part of ``search_share`` of the task's time left, the
    ``searches_left`` (this one among them) sharing it alike; the task's ``deadline`` where no share is given."""
    if deadline is None or search_share is None:
        return deadline
    now = time.monotonic()
    return min(deadline, now + max(0.0, deadline - now) * search_share / max(1, searches_left))


def augmented_nlls(engine, encoder: TaskEncoder, train: Sequence[Pair], test_input: np.ndarray,
                   grids: Sequence[np.ndarray], augmentations: Sequence[Augmentation], space: AnswerSpace,
                   batch_size: int = 16, max_len: int | None = None) -> np.ndarray:
    """NLLs of candidate grids (original frame) under each augmentation (augmented prompt, augmented answer), as
    ``space`` measures them, all in one scoring of the engine: shape (candidates, augmentations)."""
    prompts, answers = [], []
    for augmentation in augmentations:
        prompt = encoder.encode_prompt(augmentation.apply_pairs(train), augmentation.apply_grid(test_input),
                                       max_len=max_len)
        prompts.append(prompt.ids)
        answers.append([encoder.encode_answer(augmentation.apply_grid(grid)) for grid in grids])
    return np.array(engine.score(prompts, answers, space, batch_size), dtype=float).reshape(len(augmentations),
                                                                                            len(grids)).T
