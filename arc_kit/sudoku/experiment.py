"""The Sudoku experiment (paper, section 5.5): fine-tune on puzzles, then DFS + product of experts, top-1.

- ``train``: the kit's trainer (``training.pretrain``) on one pool of puzzles under fresh Sudoku
  augmentations (``puzzles.SudokuPool``). One puzzle per training sequence: the rules never change,
  so examples in the context tell the model nothing (the paper uses no test-time training here for
  the same reason), and a puzzle alone is ~230 tokens instead of ~900 for four.
- ``evaluate``: per puzzle, DFS at T (1%) under each of the inference augmentations, answers mapped
  back and merged (``solver.Solver.sample``), every candidate scored under the scoring augmentations
  (``Solver.score``), the best by the product of experts taken as the one attempt. Writes
  ``records.jsonl`` (the kit's TaskRecord layout), ``metrics.json`` and the paper's figure: the share
  of puzzles whose solution was generated, selected by PoE, and selected by generation probability,
  against the threshold (exact for thresholds at or above the run's, see ``analysis.threshold_curve``).

Its settings (``settings.SudokuEvalSettings``, ``settings.sudoku_training``) live with the kit's other settings.

Knows the Sudoku pieces and how the kit's solver is put together; nothing of files beyond its outputs.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from arc_kit.data.grids import grid_key, grid_to_json
from arc_kit.data.jsonio import write_json_atomically
from arc_kit.data.plotting import draw_threshold_curve
from arc_kit.data.tasks import Pair
from arc_kit.experiments.analysis import threshold_curve
from arc_kit.method.records import TaskRecord, TestResult
from arc_kit.method.experts import select
from arc_kit.model.devices import check_device_name
from arc_kit.outputs import (
    FolderKind,
    claim_folder,
    is_made_folder,
    remove_entry,
    replacing,
    small_json,
)
from arc_kit.progress import progress_bar
from arc_kit.settings import LoadSettings, SudokuEvalSettings, TrainingSettings, sudoku_training
from arc_kit.sudoku.puzzles import SudokuAugmentation, SudokuPool
from arc_kit.sudoku.rules import clue_count, is_valid_solution, keeps_clues, score_answer

logger = logging.getLogger(__name__)

def train(model: str, out: str | os.PathLike, pairs: Sequence[Pair], settings: TrainingSettings, *,
          copies: int = 1000, resume: bool = True, device: str = "auto", progress: bool = True):
    """Fine-tune (or train a preset from scratch) on ``pairs``; ``training.PretrainResult``."""
    from arc_kit.model.training import pretrain

    pool = SudokuPool(pairs, copies=copies, seed=settings.lora.training_seed)
    settings = sudoku_training(settings)  # one puzzle per sequence, its solution in the loss
    clues = [clue_count(pair.input) for pair in pairs]
    description = (f"Sudoku: {len(pairs)} puzzles ({min(clues)}-{max(clues)} clues, mean {np.mean(clues):.1f}), "
                   f"each under {copies} random Sudoku augmentations, one puzzle per sequence")
    return pretrain(model, out, {"sudoku": pool}, settings, data_description=description, resume=resume,
                    device=device, progress=progress, command="sudoku train")


EVALUATION_KIND = FolderKind("sudoku evaluation", owned=("records.jsonl", "evaluation.json", "metrics.json",
                                                       "threshold_curve.csv", "threshold_curve.png"), resumable=True,
                             kept="the records of the puzzles done")


CURVE_THRESHOLDS = (0.01, 0.02, 0.03, 0.05, 0.09, 0.15, 0.25, 0.4, 0.6)


def solve_puzzle(solver, puzzle_id: str, puzzle: np.ndarray, settings: SudokuEvalSettings) -> TaskRecord:
    """Candidates by DFS under the inference views, PoE scores under the scoring views, one attempt."""
    from arc_kit.method.solver import task_rng

    started = time.monotonic()
    rng = task_rng(settings.solve.seed, puzzle_id, "sudoku")
    inference = SudokuAugmentation.inference_set(rng, settings.solve.inference_augmentations)
    scoring = SudokuAugmentation.inference_set(rng, settings.solve.scoring_augmentations)
    candidates, search = solver.sample(solver.model, (), puzzle, inference, solver.settings.sampler, task_id=puzzle_id)
    generated = time.monotonic()
    solver.score(solver.model, (), puzzle, candidates, scoring)
    chosen = select(candidates, solver.settings.aggregation if scoring else "generation", count=1)  # top-1
    record = TaskRecord(puzzle_id)
    record.tests.append(TestResult([candidates[i].grid for i in chosen], candidates, [a.key for a in inference],
                                   [a.key for a in scoring], search))
    record.timings.update(generation=round(generated - started, 3), scoring=round(time.monotonic() - generated, 3),
                          total=round(time.monotonic() - started, 3))
    if settings.greedy_check:  # after everything else
        greedy, _ = solver.sample(solver.model, (), puzzle, [SudokuAugmentation()],
                                  solver.settings.sampler.replace(kind="greedy"), task_id=puzzle_id)
        record.extra["greedy_answer"] = grid_to_json(greedy[0].grid) if greedy else None
    return record


def blank_cells_right(puzzle: np.ndarray, solution: np.ndarray, answer) -> float:
    """The share of the puzzle's empty cells that ``answer`` fills as the solution does (0 for no 9x9 answer)."""
    blank, answer = np.asarray(puzzle) == 0, np.asarray(answer)  # None: an array of no shape
    if answer.shape != blank.shape or not blank.any():
        return 0.0
    return float(np.mean(answer[blank] == np.asarray(solution)[blank]))


def puzzle_metrics(records: dict[str, TaskRecord], pairs: dict[str, Pair]) -> dict:
    """Top-1 accuracy (PoE and generation probability), solutions found, validity of the answers."""
    rows = []
    for puzzle_id, record in records.items():
        pair, test = pairs[puzzle_id], record.tests[0]
        answer = test.attempts[0] if test.attempts else None
        by_generation = select(test.candidates, "generation", 1)
        right = grid_key(pair.output)
        rows.append({
            "poe": score_answer(pair.input, answer),
            "generation": score_answer(pair.input, test.candidates[by_generation[0]].grid) if by_generation else 0.0,
            "found": float(any(grid_key(c.grid) == right for c in test.candidates)),
            "answered": answer is not None,
            "valid": answer is not None and is_valid_solution(answer),
            "keeps_clues": answer is not None and keeps_clues(pair.input, answer),
            "candidates": len(test.candidates), "capped": bool(test.search.capped),
            "clues": clue_count(pair.input), "seconds": record.timings.get("total", 0.0)})
        if "greedy_answer" in record.extra:
            greedy = record.extra["greedy_answer"]  # None (no grid) is no solution and no valid Sudoku
            rows[-1].update(greedy_cells=blank_cells_right(pair.input, pair.output, greedy),
                            greedy_solved=score_answer(pair.input, greedy), greedy_valid=is_valid_solution(greedy))

    def mean(name, digits=4):
        return round(sum(float(row[name]) for row in rows) / len(rows), digits) if rows else 0.0

    greedy = {}
    if rows and all("greedy_cells" in row for row in rows):  # the diagnostic, when every puzzle has it
        greedy = {"greedy_blank_cells_right": mean("greedy_cells"), "greedy_solved": mean("greedy_solved"),
                  "greedy_valid_sudoku": mean("greedy_valid")}
    by_clues = {}
    for clues in sorted({row["clues"] for row in rows}):
        group = [row for row in rows if row["clues"] == clues]
        by_clues[str(clues)] = {"puzzles": len(group), "solved_poe": int(sum(row["poe"] for row in group)),
                                "solution_found": int(sum(row["found"] for row in group))}
    return {"puzzles": len(rows), "top1_accuracy_poe": mean("poe"), "top1_accuracy_generation": mean("generation"),
            "solution_found": mean("found"), "answered": mean("answered"), "answers_valid_sudoku": mean("valid"),
            "answers_keeping_clues": mean("keeps_clues"), "searches_capped": mean("capped"),
            "mean_candidates": mean("candidates", 2), "mean_clues": mean("clues", 2),
            "seconds_per_puzzle": mean("seconds", 2), "by_clues": by_clues, **greedy}


def sudoku_curve(records: dict[str, TaskRecord], pairs: dict[str, Pair], thresholds: Sequence[float]):
    """Per threshold: share of puzzles whose solution was generated, selected by PoE, selected by generation."""
    solutions = {puzzle_id: [pairs[puzzle_id].output] for puzzle_id in records}
    poe = threshold_curve(records, solutions, thresholds, "product", attempts=1)
    generation = threshold_curve(records, solutions, thresholds, "generation", attempts=1)
    return poe.rename(columns={"selected": "selected_poe"}).assign(selected_generation=generation["selected"])


SUDOKU_CURVE_LINES = (("found", "solution generated (among the candidates)", "o", "-"),
                      ("selected_poe", "selected by product of experts (top-1)", "s", "--"),
                      ("selected_generation", "selected by generation probability (top-1)", "^", ":"))


def draw_sudoku_curve(curve, run_threshold: float | None = None, title: str = ""):
    """The paper's Sudoku figure: generated vs selected (PoE, generation probability) against T."""
    return draw_threshold_curve(curve, run_threshold, lines=SUDOKU_CURVE_LINES, ylabel="share of puzzles",
                                title=title, threshold_label=None, legend_size=7)


def _same_evaluation(stored, identity: dict) -> bool:
    """True when ``evaluation.json``'s ``stored`` identity is ``identity``'s: the same model, and settings that read
    as the same."""
    if not isinstance(stored, dict) or stored.get("model") != identity["model"]:
        return False
    try:
        return SudokuEvalSettings.from_json(stored.get("settings") or {}).result_json() == identity["settings"]
    except (TypeError, ValueError):
        return False


def evaluate(model_path: str | os.PathLike, pairs: Sequence[Pair], out: str | os.PathLike,
             settings: SudokuEvalSettings = SudokuEvalSettings(), *, device: str = "cpu", minutes: float | None = None,
             resume: bool = True, progress: bool = True) -> dict:
    """Solve the puzzles, write records.jsonl, metrics.json, threshold_curve.csv and .png; the metrics.

    Puzzle i is ``sudoku-<i>``. ``resume``: puzzles already in ``out/records.jsonl`` (from a run with
    the same model and settings, checked against ``out/evaluation.json``) are kept, not solved again.
    ``minutes``: this call starts no new puzzle after this long; the metrics cover the puzzles done.
    """
    import matplotlib.pyplot as plt

    from arc_kit.run.record_json import append_record, read_records
    from arc_kit.method.solver import Solver
    from arc_kit.model.loading import load_model
    from arc_kit.provenance import run_info

    check_device_name(device)  # an unknown device: one line, before the folder is made
    loaded = load_model(model_path, LoadSettings(device=device, dtype="float32" if device == "cpu" else "auto"))
    identity = {"model": str(Path(model_path).resolve()), "settings": settings.result_json()}
    records_path, identity_path = Path(out) / "records.jsonl", Path(out) / "evaluation.json"
    resumed = resume and records_path.exists()
    if resumed and is_made_folder(out) and not _same_evaluation(small_json(identity_path), identity):
        raise ValueError(f"{out} holds an evaluation of another model or with other settings; "  # before a claim
                         "choose another --out or pass --no-resume")
    out = claim_folder(out, EVALUATION_KIND, "sudoku evaluate")
    if not resumed:
        remove_entry(records_path)
    write_json_atomically(identity_path, identity, indent=2)
    by_id = {f"sudoku-{index:05d}": pair for index, pair in enumerate(pairs)}
    records = read_records(records_path, task_ids=by_id)
    solver = Solver.from_loaded(loaded, settings.solve)
    started = time.monotonic()
    for puzzle_id, pair in progress_bar(by_id.items(), desc="sudoku", disable=not progress):
        if puzzle_id in records:
            continue
        if minutes is not None and time.monotonic() - started > 60 * minutes:
            logger.warning("time limit: %d of %d puzzles done", len(records), len(by_id))
            break
        record = solve_puzzle(solver, puzzle_id, pair.input, settings)
        attempts = record.tests[0].attempts
        record.correct = [bool(score_answer(pair.input, attempts[0] if attempts else None))]
        records[puzzle_id] = record
        append_record(records_path, record)
    records = {puzzle_id: records[puzzle_id] for puzzle_id in by_id if puzzle_id in records}  # in puzzle order
    metrics = {**puzzle_metrics(records, by_id), "puzzles_asked": len(by_id)}
    threshold = settings.solve.sampler.threshold
    thresholds = [t for t in CURVE_THRESHOLDS if t >= threshold]
    curve = sudoku_curve(records, by_id, thresholds)
    with replacing(out / "threshold_curve.csv", newline="") as handle:  # never through a link
        curve.to_csv(handle, index=False)
    figure = draw_sudoku_curve(curve, threshold, f"{Path(model_path).name}: {len(records)} puzzles")
    with replacing(out / "threshold_curve.png", binary=True) as handle:
        figure.savefig(handle, dpi=100, format="png")
    plt.close(figure)
    info = run_info(model=identity["model"], settings=settings.to_json(), device=device,
                    seconds_this_call=round(time.monotonic() - started, 1))
    write_json_atomically(out / "metrics.json", {"metrics": metrics, "curve": curve.to_dict("records"),
                                                 "run": info}, indent=2)
    return metrics
