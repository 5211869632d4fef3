"""The solve pipeline: per task, test-time training, candidates under m augmentations, PoE selection.

For each task: optional test-time training on its train pairs; for each test input, the sampler
runs under each of m inference augmentations (DFS by default, each search starting from the best
answer found so far); answers are decoded, mapped back to the original frame and merged; the
merged candidates are scored under m' fresh augmentations and the two best by the aggregation
become the attempts. Every random choice comes from a generator seeded by (seed, task id), so a
task's result does not depend on which tasks ran before it, in which process, or whether the run
was resumed.

``solve`` runs a whole set: each task's record is appended to ``records.jsonl`` as soon as it is
done, ``submission.json`` is rewritten (complete and valid) after every task, a rerun on the same
folder resumes, and a task that fails gets fallback attempts without stopping the others.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import time
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from arc_kit.augmentation import Augmentation
from arc_kit.decoding import AnswerSpace
from arc_kit.grids import grid_key, grid_to_json, to_grid
from arc_kit.samplers import SamplerSettings, generate
from arc_kit.scoring import AGGREGATIONS, Candidate, augmented_nlls, select
from arc_kit.submission import build_submission, score_submission, write_submission
from arc_kit.tasks import Pair, Task, TaskSet
from arc_kit.text_format import NotAGridError, TaskEncoder, TextFormat
from arc_kit.ttt import TestTimeSettings, TestTimeTrainer

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SolveSettings:
    """The whole method's settings; defaults are the paper's final configuration."""

    sampler: SamplerSettings = field(default_factory=SamplerSettings)  # DFS, T = 9%
    inference_augmentations: int = 16  # each symmetry twice, fresh colours and pair order each time
    scoring_augmentations: int = 16  # fresh ones, for the product of experts
    aggregation: str = "product"  # product | min | max | sum | generation (no scoring pass)
    test_time_training: bool = True
    ttt: TestTimeSettings = field(default_factory=TestTimeSettings)
    max_len: int = 8192  # token budget of a prompt plus its longest possible answer
    keep_background: bool = False  # augmentations permute all 10 colours, as the authors did
    scoring_batch_size: int = 16  # answers scored together on one prompt's cache
    seed: int = 0

    def __post_init__(self):
        if self.aggregation not in (*AGGREGATIONS, "generation"):
            raise ValueError(f"unknown aggregation {self.aggregation!r}")
        if self.inference_augmentations < 1:
            raise ValueError("inference_augmentations must be at least 1")

    def replace(self, **changes) -> SolveSettings:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> SolveSettings:
        """The inverse of ``to_json`` (unknown fields are errors)."""
        from arc_kit.training_data import SequenceSettings

        data = dict(data)
        data["sampler"] = SamplerSettings(**data["sampler"])
        ttt = dict(data["ttt"])
        ttt["sequences"] = SequenceSettings(**ttt["sequences"])
        data["ttt"] = TestTimeSettings(**ttt)
        return cls(**data)


def task_rng(seed: int, task_id: str, purpose: str = "") -> np.random.Generator:
    """A generator that depends only on the run seed, the task id and the purpose."""
    digest = hashlib.sha256(f"{task_id}/{purpose}".encode()).digest()
    return np.random.default_rng((seed, int.from_bytes(digest[:8], "little")))


@dataclass
class TestInputResult:
    """Everything found for one test input."""

    candidates: list[Candidate]
    attempts: list[np.ndarray]
    inference_augmentations: list[str]
    scoring_augmentations: list[str]
    search: dict[str, Any]

    __test__ = False

    def to_json(self, aggregations: Iterable[str] = AGGREGATIONS) -> dict:
        return {
            "attempts": [grid_to_json(grid) for grid in self.attempts],
            "candidates": [{"grid": grid_to_json(c.grid), "generation_nlls": c.generation_nlls,
                            "scoring_nlls": c.scoring_nlls,
                            "aggregates": {name: c.aggregate(name) for name in aggregations if c.scoring_nlls}}
                           for c in self.candidates],
            "inference_augmentations": self.inference_augmentations,
            "scoring_augmentations": self.scoring_augmentations,
            "search": self.search,
        }


class Solver:
    """A loaded model plus the settings of the method; ``solve_task`` runs it on one task."""

    def __init__(self, model, encoder: TaskEncoder, settings: SolveSettings = SolveSettings()):
        self.settings = settings
        self.encoder = encoder
        self.space = AnswerSpace.from_encoder(encoder)
        self.trainer = None
        self.model = model
        if settings.test_time_training:
            self.trainer = TestTimeTrainer(model, encoder, settings.ttt)
            self.model = self.trainer.model

    @classmethod
    def from_loaded(cls, loaded, settings: SolveSettings = SolveSettings(),
                    text_format: TextFormat = TextFormat()) -> Solver:
        return cls(loaded.model, loaded.encoder(text_format, settings.max_len), settings)

    # -- pieces, also used by the tables ---------------------------------------------------------
    @contextlib.contextmanager
    def base_model(self):
        """The model without the test-time adapter (the model itself when there is none)."""
        if self.trainer is None:
            yield self.model
        else:
            with self.trainer.adapter_disabled() as model:
                yield model

    def adapt(self, task: Task, settings: SolveSettings | None = None) -> dict:
        """Test-time training on the task's train pairs (a no-op without it); a summary.

        With ``settings.test_time_training`` off the adapter is reset, so the model is the base model.
        """
        settings = settings or self.settings
        if self.trainer is None:
            return {"steps": 0, "skipped": "off"}
        if not settings.test_time_training:
            self.trainer.reset()
            return {"steps": 0, "skipped": "off"}
        result = self.trainer.train(task.train, task_rng(self.settings.seed, task.id, "ttt"), steps=settings.ttt.steps)
        return {"steps": result.steps, "seconds": round(result.seconds, 3), "skipped": result.skipped,
                "first_loss": result.losses[0] if result.losses else None,
                "last_loss": float(np.mean(result.losses[-8:])) if result.losses else None}

    def sample(self, model, train: Sequence[Pair], test_input: np.ndarray, augmentations: Sequence[Augmentation],
               sampler: SamplerSettings, rng: np.random.Generator, task_id: str = "") -> tuple[list[Candidate], dict]:
        """Run the sampler under each augmentation; decode, map back and merge the answers."""
        merged: dict[bytes, Candidate] = {}
        stats = {"forward_calls": 0, "tokens": 0, "answers": 0, "not_grids": 0, "capped": [], "dropped": {},
                 "prompt_tokens": [], "dropped_train_pairs": 0}
        for augmentation in augmentations:
            prompt = self.encoder.encode_prompt(augmentation.apply_pairs(train), augmentation.apply_grid(test_input),
                                                max_len=self.settings.max_len, task_id=task_id,
                                                log_drops=augmentation is augmentations[0])  # once per input
            stats["prompt_tokens"].append(len(prompt))
            stats["dropped_train_pairs"] += len(prompt.dropped)
            guess = None
            if merged:
                best = min(merged.values(), key=lambda c: c.best_generation_nll)
                guess = self.encoder.encode_answer(augmentation.apply_grid(best.grid))
            result = generate(model, prompt.ids, self.space, sampler, guess=guess, seed=int(rng.integers(2**31)))
            stats["forward_calls"] += result.forward_calls
            stats["tokens"] += result.tokens_processed
            if result.capped:
                stats["capped"].append(f"{augmentation.key}: {result.capped}")
            for reason, count in result.dropped.items():
                stats["dropped"][reason] = stats["dropped"].get(reason, 0) + count
            for completion in result.completions:
                stats["answers"] += 1
                try:
                    grid = augmentation.invert_grid(self.encoder.decode_answer(completion.ids))
                except NotAGridError:
                    stats["not_grids"] += 1
                    continue
                candidate = merged.setdefault(grid_key(grid), Candidate(grid))
                nll = candidate.generation_nlls.get(augmentation.key, float("inf"))
                candidate.generation_nlls[augmentation.key] = min(nll, completion.nll)
        candidates = sorted(merged.values(), key=lambda c: c.best_generation_nll)
        return candidates, stats

    def score(self, model, train: Sequence[Pair], test_input: np.ndarray, candidates: Sequence[Candidate],
              augmentations: Sequence[Augmentation]) -> None:
        """Fill each candidate's NLL under every scoring augmentation."""
        if not candidates:
            return
        table = augmented_nlls(model, self.encoder, train, test_input, [c.grid for c in candidates], augmentations,
                               self.settings.scoring_batch_size, self.settings.max_len)
        for candidate, row in zip(candidates, table):
            candidate.scoring_nlls = [float(v) for v in row]

    def views(self, task: Task, test_index: int, settings: SolveSettings | None = None
              ) -> tuple[list[Augmentation], list[Augmentation], np.random.Generator]:
        """The inference and scoring augmentations of one test input, and the generator for the rest.

        All drawn from (seed, task id, test index) alone, so runs, resumptions and tables agree.
        """
        settings = settings or self.settings
        rng = task_rng(settings.seed, task.id, f"test{test_index}")
        inference = Augmentation.inference_set(rng, len(task.train), settings.inference_augmentations,
                                               keep_background=settings.keep_background)
        scoring = Augmentation.inference_set(rng, len(task.train), settings.scoring_augmentations,
                                             keep_background=settings.keep_background)
        return inference, scoring, rng

    # -- the method ------------------------------------------------------------------------------
    def solve_task(self, task: Task, settings: SolveSettings | None = None, rung: int = 0) -> dict:
        """Run the whole method on one task; a JSON-ready record (errors recorded, never raised).

        ``settings`` (a cheaper rung of ``ladder(self.settings)``, say) replaces the solver's own
        for this task; the test-time adapter's shape stays the solver's.
        """
        settings = settings or self.settings
        started = time.monotonic()
        record: dict[str, Any] = {"task_id": task.id, "test": [], "timings": {}, "error": None, "rung": rung}
        try:
            task = task.without_solutions()  # nothing below may see a test output
            record["ttt"] = self.adapt(task, settings)
            record["timings"]["ttt"] = round(time.monotonic() - started, 3)
            generation_seconds = scoring_seconds = 0.0
            for test_index, test_input in enumerate(task.test_inputs):
                inference, scoring, rng = self.views(task, test_index, settings)
                moment = time.monotonic()
                candidates, search = self.sample(self.model, task.train, test_input, inference, settings.sampler, rng,
                                                 task_id=task.id)
                generation_seconds += time.monotonic() - moment
                if settings.aggregation == "generation":
                    scoring = []
                if scoring:
                    moment = time.monotonic()
                    self.score(self.model, task.train, test_input, candidates, scoring)
                    scoring_seconds += time.monotonic() - moment
                chosen = select(candidates, settings.aggregation if scoring else "generation")
                result = TestInputResult(candidates, [candidates[i].grid for i in chosen],
                                         [a.key for a in inference], [a.key for a in scoring], search)
                record["test"].append(result.to_json())
            record["timings"].update(generation=round(generation_seconds, 3), scoring=round(scoring_seconds, 3))
        except Exception as error:  # one task's failure must never stop the run
            record["error"] = f"{type(error).__name__}: {error}"
            record["traceback"] = traceback.format_exc(limit=8)
            logger.warning("task %s failed: %s", task.id, record["error"])
        record["timings"]["total"] = round(time.monotonic() - started, 3)
        return record

    def solve_with_retry(self, task: Task, rung: int = 0, rungs: Sequence[SolveSettings] | None = None) -> dict:
        """``solve_task`` at ``rung``; on failure (out of memory, say) once more two rungs cheaper."""
        rungs = list(rungs or ladder(self.settings))
        record = self.solve_task(task, rungs[rung], rung)
        if record["error"] is None:
            return record
        _free_accelerator_memory()
        cheaper = min(rung + 2, len(rungs) - 1)
        retry = self.solve_task(task, rungs[cheaper], cheaper)
        retry["retried_after"] = record["error"]
        return retry


def _free_accelerator_memory() -> None:
    import gc

    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass


def ladder(settings: SolveSettings) -> list[SolveSettings]:
    """The configured settings, then ever cheaper ones: the rungs the time budget steps down.

    Halved TTT steps; halved augmentations; a DFS threshold of at least 20%; a quarter of the TTT
    steps and augmentations; finally no TTT and at most two augmentations (no more than the rung
    before: nothing grows on the way down), with DFS kept at its 20% threshold (cheaper than greedy,
    paper Table 2) and any other sampler replaced by greedy.
    """
    sampler, ttt = settings.sampler, settings.ttt
    rungs = [settings]

    def cheaper(**changes) -> None:
        rungs.append(dataclasses.replace(rungs[-1], **changes))

    cheaper(ttt=dataclasses.replace(ttt, steps=max(1, ttt.steps // 2)))
    cheaper(inference_augmentations=max(1, settings.inference_augmentations // 2),
            scoring_augmentations=max(0, settings.scoring_augmentations // 2))
    if sampler.kind == "dfs":
        cheaper(sampler=dataclasses.replace(sampler, threshold=max(sampler.threshold, 0.2)))
    cheaper(ttt=dataclasses.replace(ttt, steps=max(1, ttt.steps // 4)),
            inference_augmentations=max(1, settings.inference_augmentations // 4),
            scoring_augmentations=max(0, settings.scoring_augmentations // 4))
    last_sampler = rungs[-1].sampler if sampler.kind == "dfs" else dataclasses.replace(sampler, kind="greedy")
    cheaper(test_time_training=False, sampler=last_sampler,
            inference_augmentations=min(2, rungs[-1].inference_augmentations),
            scoring_augmentations=min(2, rungs[-1].scoring_augmentations))
    return rungs


def fallback_record(task: Task, reason: str) -> dict:
    """The record of a task that got no model work: fallback attempts only."""
    return {"task_id": task.id, "test": [], "timings": {"total": 0.0}, "error": None, "rung": -1,
            "skipped": reason}


# ---------------------------------------------------------------------------------------------
# Running a whole set, with records, resumption and an always-valid submission.

def read_records(path: Path) -> dict[str, dict]:
    """Records by task id from a JSON-lines file; a torn last line (a killed run) is ignored."""
    records = {}
    if not path.exists():
        return records
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        records[record["task_id"]] = record
    return records


def append_record(path: Path, record: dict) -> None:
    """Append one record as a line; a torn last line (a killed run) is closed first, not continued."""
    torn = False
    if path.exists() and path.stat().st_size:
        with open(path, "rb") as handle:
            handle.seek(-1, os.SEEK_END)
            torn = handle.read(1) != b"\n"
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(("\n" if torn else "") + json.dumps(record) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def answers_from_records(records: dict[str, dict]) -> dict[str, list[list[np.ndarray]]]:
    """The attempts of every record, for build_submission (failed tasks have none)."""
    return {task_id: [[to_grid(grid) for grid in test["attempts"]] for test in record.get("test", [])]
            for task_id, record in records.items()}


@dataclass
class SolveRun:
    """What ``solve`` produced."""

    out: Path
    records: dict[str, dict]
    submission_path: Path
    score: Any = None  # a submission.Score when solutions were known
    seconds: float = 0.0


def solve(tasks: TaskSet, solver: Solver, out: str | os.PathLike, *, solutions: TaskSet | None = None,
          info: dict | None = None, progress: bool = True, restart: bool = False,
          task_ids: Sequence[str] | None = None, deadline: float | None = None,
          records_name: str = "records.jsonl", write_outputs: bool = True) -> SolveRun:
    """Solve every task (or ``task_ids``) of ``tasks``, writing records, submission and scores to ``out``.

    ``tasks`` may hold solutions; the solver never sees them (``solve_task`` strips them), they are
    only used for scoring, as are ``solutions`` if given separately. With a ``deadline`` (seconds
    since the epoch) a ``planner.Planner`` orders the tasks cheapest first and steps down the
    ladder of cheaper settings as time runs short; tasks it cannot fit get fallback answers. A
    task that fails is retried once, cheaper. ``write_outputs=False`` (a worker process) writes only
    the records, under ``records_name``.
    """
    from tqdm.auto import tqdm

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    records_path, run_path = out / records_name, out / "run.json"
    settings_json = json.loads(json.dumps(solver.settings.to_json()))
    if restart:
        records_path.unlink(missing_ok=True)
        if write_outputs:
            run_path.unlink(missing_ok=True)
    if run_path.exists():
        if json.loads(run_path.read_text()).get("settings") != settings_json:
            raise ValueError(f"{out} holds a run with other settings; use another --out, or --restart to discard it")
    elif write_outputs:
        run_path.write_text(json.dumps({"settings": settings_json, **(info or {})}, indent=2, default=str) + "\n")
    records = read_records(records_path)
    wanted = list(task_ids) if task_ids is not None else tasks.ids
    todo = [task_id for task_id in wanted if task_id not in records]
    if records and todo != wanted:
        logger.warning("resuming: %d of %d tasks already done in %s", len(wanted) - len(todo), len(wanted), out)
    scoring_set = solutions if solutions is not None else (tasks if tasks.has_solutions else None)
    submission_path = out / "submission.json"
    started = time.monotonic()
    rungs = ladder(solver.settings)
    planner = None
    if deadline is not None:
        from arc_kit.planner import Planner, measure

        sizes = [measure(tasks[task_id], solver.encoder, solver.settings.max_len) for task_id in todo]
        planner = Planner(sizes, solver.settings, deadline)
        todo = planner.order()

    def write() -> None:
        if write_outputs:
            write_submission(submission_path, build_submission(tasks, answers_from_records(records)), tasks)

    write()  # a complete, valid submission exists from the start
    bar = tqdm(todo, desc="solve", unit="task", disable=not progress)
    solved = sum(_record_correct(records.get(i)) for i in records)
    for task_id in bar:
        task = tasks[task_id]
        rung = planner.choose(task_id) if planner else 0
        if rung < 0:
            record = fallback_record(task, "out of time")
        else:
            record = solver.solve_with_retry(task, rung, rungs)
        if planner:
            planner.done(task_id, record["rung"], record["timings"] if not record.get("error") else None)
            bar.set_description(f"solve (rung {record['rung']}, {planner.seconds_left() / 60:.0f} min left)")
        if scoring_set is not None and task_id in scoring_set:
            answers = answers_from_records({task_id: record})
            entries = build_submission(tasks.select([task_id]), answers)[task_id]
            outputs = scoring_set[task_id].test_outputs
            record["correct"] = [any(np.array_equal(np.array(entry[name]), output)
                                     for name in ("attempt_1", "attempt_2"))
                                 for entry, output in zip(entries, outputs)]
            solved += _record_correct(record)
            bar.set_postfix(solved=f"{solved:g}/{len(records) + 1}")
        records[task_id] = record
        append_record(records_path, record)
        write()
    run = SolveRun(out, records, submission_path, seconds=time.monotonic() - started)
    if scoring_set is not None and write_outputs:
        submission = json.loads(submission_path.read_text())
        run.score = score_submission(submission, scoring_set.select([i for i in wanted if i in scoring_set]))
        table = run.score.table.merge(_record_table(records), on="task_id", how="left")
        table.to_csv(out / "scores.csv", index=False)
        (out / "score.json").write_text(json.dumps({
            "score": run.score.score, "correct": run.score.correct, "total": run.score.total,
            "task_score": run.score.task_score, "tasks": len(run.score.table)}, indent=2) + "\n")
    return run


def _record_correct(record: dict | None) -> float:
    if not record or not record.get("correct"):
        return 0.0
    return sum(record["correct"]) / len(record["correct"])


def _record_table(records: dict[str, dict]):
    import pandas as pd

    rows = []
    for task_id, record in records.items():
        tests = record.get("test", [])
        rows.append({"task_id": task_id,
                     "candidates": sum(len(t["candidates"]) for t in tests),
                     "forward_calls": sum(t["search"]["forward_calls"] for t in tests),
                     "ttt_seconds": record["timings"].get("ttt"),
                     "generation_seconds": record["timings"].get("generation"),
                     "scoring_seconds": record["timings"].get("scoring"),
                     "total_seconds": record["timings"].get("total"),
                     "rung": record.get("rung", 0),
                     "error": record.get("error") or record.get("skipped")})
    columns = ["task_id", "candidates", "forward_calls", "ttt_seconds", "generation_seconds", "scoring_seconds",
               "total_seconds", "rung", "error"]
    return pd.DataFrame(rows, columns=columns)  # the columns also when no task has a record yet


def default_model_path() -> Path:
    """The model the kit ships: $ARC_KIT_MODEL, else kaggle_dataset/model beside the package source."""
    if os.environ.get("ARC_KIT_MODEL"):
        return Path(os.environ["ARC_KIT_MODEL"])
    here = Path(__file__).resolve().parents[1] / "kaggle_dataset" / "model"
    if (here / "config.json").exists():
        return here
    raise FileNotFoundError("no default model found: set ARC_KIT_MODEL or pass --model (the repository ships one "
                            "in kaggle_dataset/model)")
