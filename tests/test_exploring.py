"""Exploring in Python: tasks, grids, augmentations and records that draw themselves, an answer token by token, the
record's verdict, the run report (in a real browser too), the progress bars, and the README's section that shows them.

Pictures are checked against what they draw: every cell of a grid's SVG read back into a grid (the slow, obvious
reading of its paths) equals the grid; one cell size across a picture's panels.
"""

from __future__ import annotations

import io
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from browser import Browser, chromium
from conftest import bigram_model

from arc_kit.cli import main
from arc_kit.data.augmentation import Augmentation
from arc_kit.data.datasets import load_tasks
from arc_kit.data.pictures import ARC_COLOURS, grid_svg, picture, task_picture
from arc_kit.data.submission import any_attempt_right
from arc_kit.data.tasks import Pair, Task, TaskSet
from arc_kit.method.answer_tokens import answer_tokens
from arc_kit.method.answers import AnswerSpace
from arc_kit.method.engine import make_engine
from arc_kit.method.experts import Candidate
from arc_kit.method.record_view import probability_text, ranked_candidates, show_record
from arc_kit.method.records import SearchStats, TaskRecord, TestResult
from arc_kit.method.solver import Solver
from arc_kit.method.transformers_forward import sequence_nll
from arc_kit.model.loading import load_model
from arc_kit.progress import progress_bar
from arc_kit.run.jobs import solve_job
from arc_kit.run.report import is_report, write_report
from arc_kit.settings import TEST_TIME_TRAINING, SamplerSettings, SolveSettings
from arc_kit.text import TaskEncoder, Vocabulary

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = SolveSettings(sampler=SamplerSettings("dfs", threshold=0.05, max_forward_calls=200),
                         inference_augmentations=2, scoring_augmentations=4, ttt=TEST_TIME_TRAINING.replace(steps=2),
                         max_len=2048)
TASK_IDS = ["00576224", "66e6c45b", "6ea4a07e"]  # small prompts; 6ea4a07e has two test inputs


def cells_drawn(svg: str) -> np.ndarray:
    """The grid an SVG of ``grid_svg`` draws, read back cell by cell from its paths (black where none is)."""
    width, height = map(int, re.search(r'viewBox="0 0 (\d+) (\d+)"', svg).groups())
    grid = np.zeros((height, width), dtype=np.uint8)
    for colour, path in re.findall(r'<path fill="(#[0-9A-F]{6})" d="([^"]*)"', svg):
        for x, y, run in re.findall(r"M(\d+) (\d+)h(\d+)v1h-\d+z", path):
            grid[int(y), int(x):int(x) + int(run)] = ARC_COLOURS.index(colour)
    return grid


def svg_sizes(html: str) -> list[tuple[int, int, int, int]]:
    """(pixel width, pixel height, cells across, cells down) of every grid in a picture."""
    return [tuple(map(int, found)) for found in
            re.findall(r'<svg [^>]*width="(\d+)" height="(\d+)" viewBox="0 0 (\d+) (\d+)"', html)]


def test_a_grid_is_drawn_cell_for_cell():
    rng = np.random.default_rng(0)
    for shape in [(1, 1), (3, 7), (30, 30), (5, 2)]:
        grid = rng.integers(0, 10, size=shape).astype(np.uint8)
        grid[0, :] = 4  # a run across a whole row
        np.testing.assert_array_equal(cells_drawn(grid_svg(grid, 10)), grid)


def test_a_task_draws_itself_with_sizes_in_its_titles_and_one_cell_size():
    task = load_tasks("arc-agi-1/evaluation")["00576224"]
    html = task._repr_html_()
    assert html.count("2x2") == 3 and html.count("6x6") == 3  # three inputs, three outputs, each captioned
    sizes = svg_sizes(html)
    assert len(sizes) == 6 and len({width / across for width, _, across, _ in sizes}) == 1  # one cell size
    assert sizes[0][0] < sizes[1][0]  # so a 2x2 input is smaller than its 6x6 output
    assert "<script" not in html and "http" not in html.replace("http://www.w3.org/2000/svg", "")
    assert "00576224 (2 train, 1 test)" in html
    hidden = task.without_solutions()._repr_html_()
    assert hidden.count("6x6") == 2 and "unknown" in hidden
    output = task.test[0].output
    assert "attempt 1 ✓" in task_picture(task, [[output]]).html and "no answer" in task_picture(task, [[]]).html
    assert "✓" not in task_picture(task, [[output]], show_solutions=False).html  # no verdict from a hidden output
    assert "input" in Pair([[1]], [[2, 2]])._repr_html_()


def test_a_grid_and_an_augmentation_show_themselves():
    grid = np.array([[1, 2], [3, 4]], dtype=np.uint8)
    shown = picture(grid, ["mine"], title="one grid")._repr_html_()
    assert "mine" in shown and "2x2" in shown and "one grid" in shown and len(svg_sizes(shown)) == 1
    assert len(svg_sizes(picture([grid, grid.T]).html)) == 2
    augmentation = Augmentation(1, (3, 0, 1, 2, 4, 5, 6, 7, 8, 9), (1, 0))
    assert augmentation.symmetry_name == "rot90"
    assert augmentation.name == "rot90, colours 3012456789, order 1,0"
    assert Augmentation(4).name == "transpose, colours unchanged"
    html = augmentation._repr_html_()
    assert "rot90" in html and "order 1, 0" in html and html.count('title="colour') == 20  # two rows of swatches


def record_of(task: Task, attempts, candidates, correct=None) -> TaskRecord:
    test = TestResult(attempts, candidates, ["s0-c0123456789"], ["s0-c0123456789", "s1-c3012456789"],
                      SearchStats(forward_calls=7, answers=3, not_grids=1))
    return TaskRecord(task.id, [test], {"ttt": 1.0, "generation": 2.0, "scoring": 0.5, "total": 3.6},
                      correct=correct)


def test_a_record_shows_itself_and_its_repr_is_short():
    task = Task("t", [Pair([[1]], [[2]])], [Pair([[3]], [[4, 4]])])
    right, wrong = np.array([[4, 4]], dtype=np.uint8), np.array([[5]], dtype=np.uint8)
    candidates = [Candidate(wrong, {"s0-c0123456789": math.log(2)}, [math.log(4), math.log(4)]),
                  Candidate(right, {"s0-c0123456789": math.log(4)}, [math.log(2), math.log(2)])]
    record = record_of(task, [right, wrong], candidates, correct=[True])
    assert ranked_candidates(record.tests[0])[0] is candidates[1]  # by the product of experts: 1/2 per view
    assert "array" not in repr(record) and "right" in repr(record) and "array" not in repr(record.tests[0])
    assert "array" not in repr(candidates[0]) and "1x1 grid" in repr(candidates[0])
    html = show_record(record, task).html
    assert "attempt 1 ✓" in html and "attempt 2 ✗" in html and "50%" in html and "25%" in html
    assert "rot90<br>" in html and "3012456789" in html  # a scoring view's whole name: symmetry, colour map
    assert "PoE (2 views)" in html and "training 1.0 s" in html and "7 forward calls" in html
    nothing = record_of(task, [], [], correct=[False])
    assert "no answer" in nothing._repr_html_() and "no answer" in repr(nothing)
    assert [probability_text(-math.log(p)) for p in (0.42, 0.042, 0.0042, 0.00004)] == ["42%", "4.2%", "0.42%",
                                                                                         "4e-5"]


@pytest.fixture(scope="module")
def tasks():
    return load_tasks("arc-agi-1/evaluation").select(TASK_IDS)


@pytest.fixture(scope="module")
def solver(model_folder):
    return Solver.from_loaded(load_model(model_folder, device="cpu"), SETTINGS)


def test_solve_task_says_whether_its_attempts_are_right(solver, tasks):
    task = tasks["6ea4a07e"]  # two test inputs
    record = solver.solve_task(task)
    assert len(record.correct) == 2
    assert record.correct == [any_attempt_right(test.attempts, pair.output)
                              for test, pair in zip(record.tests, task.test)]
    first = record.tests[0].attempts[0]  # the solver never sees the outputs: with the first attempt as the answer,
    rigged = Task(task.id, task.train, (Pair(task.test[0].input, first), *task.test[1:]))  # it is right
    assert solver.solve_task(rigged).correct[0] is True
    assert solver.solve_task(task.without_solutions()).correct is None


def test_an_answer_token_by_token_sums_to_the_engines_nll_and_the_reference():
    model, _ = bigram_model()
    encoder = TaskEncoder(Vocabulary(), max_len=2048)
    space = AnswerSpace.from_encoder(encoder)
    task = load_tasks("arc-agi-1/evaluation")["00576224"]
    prompt = encoder.encode_prompt(task.train, task.test[0].input).ids
    answer = encoder.encode_answer(np.array([[3], [3]], dtype=np.uint8))
    tokens = answer_tokens(make_engine(model), encoder, prompt, answer, space)
    reference = sequence_nll(model, prompt, [answer], space)[0]
    assert tokens.nll == pytest.approx(reference, abs=1e-4)
    assert tokens.nll == pytest.approx(make_engine(model).score([prompt], [[answer]], space)[0][0], abs=1e-4)
    assert "".join(tokens.texts) == encoder.text(answer)
    assert all(other != text for other, text in zip(tokens.other_texts, tokens.texts))
    assert len(tokens.table()) == len(answer) and "least sure" in tokens._repr_html_()


@pytest.fixture(scope="module")
def run_folder(model_folder, tasks, tmp_path_factory):
    """A run of three tasks (one with two test inputs) by the bigram model, in this process, with its report."""
    out = tmp_path_factory.mktemp("report") / "run"
    run = solve_job(tasks, model_folder, SETTINGS, out, workers=1, progress=False,
                    info={"dataset": "arc-agi-1/evaluation"})
    assert run.report_path == out / "report.html"
    return out


def test_a_run_writes_its_report_beside_its_submission(run_folder):
    page = (run_folder / "report.html").read_text()
    assert is_report(run_folder / "report.html")
    assert page.count('<section class="task"') == 3 and all(f'data-id="{task}"' in page for task in TASK_IDS)
    assert "score</th><td>0 of 3 tasks right" in page or "tasks right" in page
    assert "train 0 input" in page and "attempt 1" in page and "PoE (4 views)" in page
    assert "<script>" in page and "http" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "DFS T=5%, 2+4 augmentations, TTT 2 steps" in page


def test_the_report_command_writes_where_asked_and_never_over_a_users_file(run_folder, tmp_path, capsys):
    out = tmp_path / "mine.html"
    assert main(["report", str(run_folder.parent), "--out", str(out)]) == 0  # the folder above a run: found
    assert f"wrote {out}" in capsys.readouterr().out and is_report(out)
    assert main(["report", str(run_folder), "--out", str(out)]) == 0  # its own report: replaced
    users = tmp_path / "users.html"
    users.write_text("<html>mine</html>")
    assert main(["report", str(run_folder), "--out", str(users)]) == 1
    assert "arc-kit did not make it" in capsys.readouterr().err and users.read_text() == "<html>mine</html>"
    assert main(["report", str(tmp_path / "nothing")]) == 1
    assert "holds no run" in capsys.readouterr().err


def test_a_report_without_its_tasks_still_shows_every_record(run_folder, tmp_path):
    out = write_report(run_folder, tmp_path / "alone.html", tasks=TaskSet([], "another set"))
    page = out.read_text()
    assert page.count('<section class="task"') == 3 and "are not at hand" in page


@pytest.mark.slow
@pytest.mark.processes
def test_the_report_in_a_real_browser(run_folder):
    """Headless Chromium loads the report with no console error, shows every task, a filter hides and shows them,
    and its screenshot is not blank. CI (``.ci/run``) installs Debian's chromium where it is missing."""
    executable = chromium()
    if executable is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: .ci/run installs it (apt-get install chromium)")
        pytest.skip("no chromium here (apt-get install chromium)")
    from PIL import Image

    browser = Browser(executable)
    shown = "Array.from(document.querySelectorAll('section.task')).filter(s => !s.hidden).map(s => s.dataset.id)"
    try:
        browser.open((run_folder / "report.html").as_uri())
        assert browser.evaluate(shown) == list(browser.evaluate("Array.from(document.querySelectorAll("
                                                                "'section.task'), s => s.dataset.id)"))
        assert sorted(browser.evaluate(shown)) == sorted(TASK_IDS)
        statuses = browser.evaluate("Array.from(document.querySelectorAll('section.task'), s => s.dataset.status)")
        status = statuses[0]
        browser.click(f"input[value={status}]")  # unticked: the tasks of that status are hidden
        assert len(browser.evaluate(shown)) == len(statuses) - statuses.count(status)
        browser.click(f"input[value={status}]")  # ticked again: all back
        assert sorted(browser.evaluate(shown)) == sorted(TASK_IDS)
        browser.evaluate("document.getElementById('sort').value = 'id'; "
                         "document.getElementById('sort').dispatchEvent(new Event('change'))")
        assert browser.evaluate(shown) == sorted(TASK_IDS)
        image = Image.open(io.BytesIO(browser.screenshot())).convert("RGB")
        assert browser.errors() == []
    finally:
        browser.close()
    colours = {colour for _, colour in image.getcolors(1 << 20)}
    assert len(colours) > 50  # text, grids, tables: not a blank page
    assert sum(tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)) in colours for c in ARC_COLOURS) >= 4  # grids drawn


def test_progress_bars_are_text_without_ipywidgets_quiet_off_a_terminal_and_in_order_in_jupyter(monkeypatch):
    import importlib.util

    from tqdm import std

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None)
    bar = progress_bar(range(3), file=io.StringIO())
    assert type(bar) is std.tqdm
    assert bar.mininterval == (0.1 if sys.stderr.isatty() else 10.0)
    bar.close()
    monkeypatch.setitem(sys.modules, "ipykernel", sys)  # in Jupyter: on stdout, with the lines printed beside it
    printed = io.StringIO()
    monkeypatch.setattr(sys, "stdout", printed)
    with progress_bar(range(3), desc="jupyter") as bar:
        list(bar)
    assert "jupyter" in printed.getvalue()


@pytest.mark.slow
@pytest.mark.processes
def test_the_readmes_exploring_section_runs(tmp_path):
    """The README's section on exploring in Python, every code block of it in order, in a fresh interpreter (the
    bigram model stands in for the shipped one: ARC_KIT_MODEL)."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Exploring in Python")[1].split("\n## ")[0]
    code = "\n".join(re.findall(r"```python\n(.*?)```", section, re.S))
    assert "load_tasks" in code and "solve_task" in code and "explore" in code
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                            timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"})
    assert result.returncode == 0, result.stderr[-3000:]


def test_the_rank_plot_names_its_dots_and_counts_what_it_draws():
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    from arc_kit.data.plotting import draw_rank_improvement

    ranks = pd.DataFrame({"task_id": ["a", "b", "c", "c"], "test_index": [0, 0, 0, 1], "candidates": [3] * 4,
                          "rank_generation": [2, 2, 1, 5], "rank_poe": [1, 1, 1, 2]})
    axes = draw_rank_improvement(ranks).axes[0]
    assert sorted(text.get_text() for text in axes.texts) == ["a, b", "c/0", "c/1"]  # two dots at one place: one label
    assert axes.get_title().startswith("4 test outputs") and "at 3 places: PoE better 3, worse 0" in axes.get_title()
