"""Shared fixtures: tiny ARC tasks built in the test, the Kaggle files that hold them, and micro models; and the
garbage collector kept off what lives for the whole session (``_freeze_what_lives``).

Everything here is made from a seed on the CPU; nothing is downloaded.
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from arc_kit.data.task_files import parse_tasks
from arc_kit.data.tasks import TaskSet


SEARCH_FEEDING = ("forward_calls", "engine_steps", "tokens", "draft_tokens", "draft_accepted")


def assert_same_finds(record, expected) -> None:
    """Two task records found the same: every test's attempts, candidates, augmentations and scoring NLLs alike,
    the generation NLLs within 1e-5. "auto" drafts follow the step costs measured on the machine at the time, so
    which positions share a step, how many tokens the searches fed, and the float rounding of a generation NLL
    may differ from run to run (5e-7 seen); what the searches found may not."""
    from arc_kit.run.record_json import to_json

    found, wanted = to_json(record)["test"], to_json(expected)["test"]
    assert len(found) == len(wanted)
    for test, other in zip(found, wanted):
        for search in (test["search"], other["search"]):
            for name in SEARCH_FEEDING:
                search.pop(name, None)
        for candidate, known in zip(test["candidates"], other["candidates"]):
            assert candidate.pop("generation_nlls") == pytest.approx(known.pop("generation_nlls"), rel=0, abs=1e-5)
        assert test == other


def _freeze_what_lives() -> None:
    """What is alive now (torch, transformers and every other module imported, the test items, the session's
    models) is frozen out of the garbage collector: a full collection (the kit's own after an out-of-memory error
    or a failed task, or Python's own every so often) then walks only what was made since, not half a million
    objects, a second or so each. Nothing a test checks changes; what is frozen is never collected."""
    gc.collect()
    gc.freeze()


# no automatic collection while the test files are imported: torch, transformers and peft set off a full collection
# over an ever larger heap again and again (seconds in all); one at the end of collecting, then the freeze
gc.disable()


def pytest_collection_finish(session):
    _freeze_what_lives()
    gc.enable()


# The modules whose tests that start processes take longest, longest first (minutes to half a minute each, measured
# in ``make test``): each worker takes the next group as it is free, so that none ends alone on a long one
LONGEST = ("test_install.py", "test_ray_cluster.py", "test_pool.py", "test_readme_commands.py", "test_kaggle.py",
           "test_exploring.py", "test_fuzz.py", "test_run.py", "test_fuzz_commands.py", "test_training.py")


def pytest_configure(config):
    """pytest-xdist hands out the groups in the order below, not (its default) those of the most tests first, which
    would leave the install, two tests of minutes, to the end."""
    if config.pluginmanager.hasplugin("xdist"):
        config.option.loadscopereorder = False


@pytest.hookimpl(wrapper=True)  # around pytest-xdist's own: the groups before it reads them, checked after
def pytest_collection_modifyitems(config, items):
    """How ``make test`` (``pytest -n 2 --dist loadgroup``) shares the tests between its two workers: the in-process
    tests on the shared tiny models are one group, run by one worker (``pytest -m "not processes"`` runs them
    alone); the tests that start processes (``@pytest.mark.processes``: installs, notebooks, Ray, commands run as
    processes, training in two processes) are a group for each module, so that what a module's fixtures start (one
    Ray, a finished run, the install's second check beside its first) is started once, run by whichever worker is
    free, the longest modules first. Most of a process test's time is spent waiting (a process starting, Ray, a
    watchdog's poll), so one beside the in-process tests, or two side by side once those are done, keep both cores
    busy.

    The groups must reach pytest-xdist's scheduler (the ``@group`` ending of each node id); where a pytest release
    stops that, the in-process tests would be spread over both workers, their tiny models built twice and the suite
    minutes slower with nothing failing: that is said in one line instead."""
    if hasattr(config, "workerinput"):  # a pytest-xdist worker's collection (the driver collects nothing)
        def order(item):
            if not item.get_closest_marker("processes"):
                return 0, 0
            return 1, LONGEST.index(item.path.name) if item.path.name in LONGEST else len(LONGEST)
        items.sort(key=order)  # stable: the order within each part kept
        for item in items:
            group = f"processes-{item.path.stem}" if item.get_closest_marker("processes") else "in-process"
            item.add_marker(pytest.mark.xdist_group(group))
    return (yield)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: none without it (``-p no:xdist``)
def pytest_xdist_node_collection_finished(node, ids):
    """On ``make test``'s driver: each worker's tests, as pytest-xdist will schedule them, must end in their
    group, or the groups are lost (see above)."""
    if node.config.getvalue("dist") == "loadgroup" and ids and "@" not in ids[0]:
        pytest.exit(f"pytest {pytest.__version__} keeps pytest-xdist's loadgroup from grouping the tests "
                    "(pytest-xdist#1386): install the pytest that requirements-test.txt names", returncode=4)


@pytest.fixture(scope="module", autouse=True)
def frozen_after_each_module():
    """After each test file, what outlives it (the session's fixtures, modules its tests imported) is frozen too."""
    yield
    _freeze_what_lives()


def _grid(rng: np.random.Generator, height: int, width: int) -> list[list[int]]:
    return rng.integers(0, 10, size=(height, width)).tolist()


def _task_json(seed: int = 0, train: int = 2, test: int = 1, height: int = 3, width: int = 3) -> dict:
    """A valid task in the ARC file layout, test outputs included (the output flips the input)."""
    rng = np.random.default_rng(seed)

    def pair() -> dict:
        grid = _grid(rng, height, width)
        return {"input": grid, "output": grid[::-1]}

    return {"train": [pair() for _ in range(train)], "test": [pair() for _ in range(test)]}


def _split_kaggle(tasks: dict[str, dict]) -> tuple[dict, dict]:
    """(challenges, solutions) in the Kaggle layout from tasks that carry their test outputs."""
    challenges = {task_id: {"train": task["train"], "test": [{"input": pair["input"]} for pair in task["test"]]}
                  for task_id, task in tasks.items()}
    solutions = {task_id: [pair["output"] for pair in task["test"]] for task_id, task in tasks.items()}
    return challenges, solutions


PLAIN = {"train": [{"input": [[1, 2]], "output": [[2, 1]]}], "test": [{"input": [[3, 4]]}]}  # the smallest valid task


QUICK = ["--sampler", "greedy", "--ttt-steps", "1", "--augmentations", "1", "--scoring-augmentations", "1",
         "--max-len", "2048", "--device", "cpu"]  # a command's cheapest settings: one view, greedy, one TTT step


def run(capsys, *argv) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``arc-kit ARGV`` run in this process; argparse's usage error is its status."""
    from arc_kit.cli import main

    try:
        status = main([str(arg) for arg in argv])
    except SystemExit as stop:
        status = stop.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def file_tree(root: Path) -> dict[str, tuple]:
    """Every entry below ``root``: a file's bytes, a link's target, a folder as such (links not followed)."""
    found = {}
    for folder, folders, names in os.walk(root):
        for name in folders + names:
            path = Path(folder) / name
            found[str(path.relative_to(root))] = (("link", os.readlink(path)) if path.is_symlink() else
                                                  ("folder",) if path.is_dir() else ("file", path.read_bytes()))
    return found


@pytest.fixture
def no_model_work(monkeypatch):
    """The solver gives every task fallback answers at once: a run then tests loading, folders and the submission."""
    from arc_kit.method.records import fallback_record
    from arc_kit.method.solver import Solver

    monkeypatch.setattr(Solver, "solve_with_retry", lambda self, task, *_, **__: fallback_record(task.id, "test"))


@pytest.fixture
def tasks_file(tmp_path) -> Path:
    """Two plain tasks, ``t1`` and ``t2``, in ``tmp_path/input/challenges.json``."""
    path = tmp_path / "input" / "challenges.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"t1": PLAIN, "t2": PLAIN}))
    return path


def _write_json(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.fixture
def make_task_json() -> Callable[..., dict]:
    """``make_task_json(seed, train=2, test=1, height=3, width=3)``: a valid task with test outputs."""
    return _task_json


@pytest.fixture
def split_kaggle() -> Callable[[dict[str, dict]], tuple[dict, dict]]:
    """``split_kaggle(tasks)``: (challenges, solutions) dicts in the Kaggle layout."""
    return _split_kaggle


@pytest.fixture
def write_json() -> Callable[[Path, object], Path]:
    """``write_json(path, data)``: write JSON, creating parent folders; returns the path."""
    return _write_json


@pytest.fixture
def small_tasks_json() -> dict[str, dict]:
    """Three tasks, ids deliberately not in sorted order; the second has two test inputs."""
    return {
        "f00d0003": _task_json(seed=3),
        "0bad0001": _task_json(seed=1, train=3, test=2, height=2, width=4),
        "a1b2c3d4": _task_json(seed=2, height=5, width=1),
    }


@pytest.fixture
def small_task_set(small_tasks_json) -> TaskSet:
    """``small_tasks_json`` parsed, test outputs included."""
    challenges, solutions = _split_kaggle(small_tasks_json)
    return parse_tasks(challenges, solutions, name="small")


@dataclass(frozen=True)
class KaggleFiles:
    challenges: Path
    solutions: Path
    tasks: dict[str, dict]  # the tasks written, test outputs included


@pytest.fixture
def kaggle_files(tmp_path, small_tasks_json) -> KaggleFiles:
    """``small_tasks_json`` written as a Kaggle evaluation challenges + solutions pair in tmp_path."""
    challenges, solutions = _split_kaggle(small_tasks_json)
    return KaggleFiles(
        challenges=_write_json(tmp_path / "kaggle" / "arc-agi_evaluation_challenges.json", challenges),
        solutions=_write_json(tmp_path / "kaggle" / "arc-agi_evaluation_solutions.json", solutions),
        tasks=small_tasks_json,
    )


@pytest.fixture(scope="session")
def micro_model(tmp_path_factory):
    """A fresh (untrained) micro model folder, the smallest real model the kit can load."""
    from arc_kit.model.loading import create_model, save_model

    model, tokenizer = create_model("micro", seed=0)
    return save_model(model, tokenizer, tmp_path_factory.mktemp("micro_model"), {"preset": "micro"})


def _one_hot_model(head_rows):
    """A micro Llama that reads only the current token: one-hot embeddings, every layer's output
    projections zeroed, and its head from ``head_rows(size, vocabulary)`` (logits[current, next])."""
    import torch

    from arc_kit.model.loading import create_model
    from arc_kit.text import Vocabulary

    model, tokenizer = create_model("micro", seed=0)
    vocabulary = Vocabulary()
    size = vocabulary.vocab_size
    assert model.config.hidden_size == size  # one-hot embeddings need as many dimensions as tokens
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.embed_tokens.weight.copy_(torch.eye(size))
        model.model.norm.weight.fill_(1.0)
        # RMS-normalising a one-hot vector multiplies it by sqrt(size)
        model.lm_head.weight.copy_(head_rows(size, vocabulary).T / size ** 0.5)
    return model.eval(), tokenizer


def bigram_model():
    """A micro Llama whose next token depends on the current token only, with hand-set probabilities.

    After the output prefix it writes small grids (mostly 3s, 5s and 7s, rows of one or two cells),
    so DFS, scoring and selection all see real candidates in milliseconds.
    """
    import torch

    def head_rows(size, vocabulary):
        eos = vocabulary.eos_id
        newline, output_prefix = vocabulary.encode("\n")[0], vocabulary.encode("+/-=O")[0]
        logits = torch.full((size, size), -4.0)  # logits[current, next]
        logits[output_prefix, :10] = 0.0
        logits[output_prefix, 3], logits[output_prefix, 5], logits[output_prefix, 7] = 3.0, 2.4, 1.8
        for digit in range(10):
            logits[digit, newline], logits[digit, digit] = 2.5, 1.0
        logits[newline, :10], logits[newline, eos] = -1.0, 2.5
        return logits

    return _one_hot_model(head_rows)


def eos_model():
    """A micro Llama that writes <eos> at once, whatever it is shown: no answer is a grid.

    A run with it ends as a run with an untrained model does (every task on fallback answers: its
    test inputs), but in milliseconds: an untrained model writes ~900 tokens before the budget stops
    each answer.
    """
    import torch

    def head_rows(size, vocabulary):
        logits = torch.zeros((size, size))
        logits[:, vocabulary.eos_id] = size ** 0.5  # <eos> by sqrt(size) = 8 logits over every other token
        return logits

    return _one_hot_model(head_rows)


@pytest.fixture(scope="session")
def fallback_model(tmp_path_factory):
    """``eos_model`` saved as a model folder: the quickest model a whole run can use (fallback answers only)."""
    from arc_kit.model.loading import save_model

    model, tokenizer = eos_model()
    return save_model(model, tokenizer, tmp_path_factory.mktemp("eos"), {"preset": "micro", "eos": True})


@pytest.fixture(scope="session")
def model_folder(tmp_path_factory):
    """The bigram model saved as a model folder."""
    from arc_kit.model.loading import save_model

    model, tokenizer = bigram_model()
    return save_model(model, tokenizer, tmp_path_factory.mktemp("bigram"), {"preset": "micro", "bigram": True})


@pytest.fixture(scope="session", autouse=True)
def shipped_model_is_the_bigram_model(model_folder):
    """Tests never build the shipped model's base (a 93 MB download): ARC_KIT_MODEL points at a micro model.

    A test that needs ARC_KIT_MODEL unset or elsewhere sets it with its own monkeypatch.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ARC_KIT_MODEL", str(model_folder))
        yield model_folder
