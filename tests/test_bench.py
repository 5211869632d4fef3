"""bench.py: the figures are what they claim to be (medians, prefill subtracted, the same work on both sides).

Timings are replaced by fixed numbers where a formula is checked; the model is the conftest bigram model.
"""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
import torch

from arc_kit import bench
from arc_kit.bench import BenchResult
from arc_kit.decoding import AnswerSpace
from arc_kit.dfs import DfsSettings, dfs_search
from arc_kit.models import load_model
from arc_kit.text_format import TaskEncoder


@pytest.fixture(scope="module")
def loaded(model_folder):
    return load_model(model_folder, device="cpu")


def test_a_result_line_shows_both_figures_and_their_ratio():
    result = BenchResult("scoring", 0.004, 0.02, "/token", "3 prompts")
    assert result.ratio == pytest.approx(0.2)
    assert result.line().split() == ["scoring", "ours", "4.00", "ms/token", "reference", "20.00", "ms/token",
                                     "ratio", "0.20x", "3", "prompts"]
    assert math.isnan(BenchResult("x", 1.0, 0.0, "").ratio)


def test_timed_gives_the_median_of_its_repeats_and_the_last_result(monkeypatch, loaded):
    clock = iter([0.0, 5.0, 10.0, 11.0, 20.0, 23.0, 30.0, 40.0, 50.0, 50.5])  # spans 5, 1, 3, 10, 0.5
    monkeypatch.setattr(bench.time, "perf_counter", lambda: next(clock))
    calls = []
    seconds, result = bench._timed(loaded.model, lambda: calls.append(len(calls)) or len(calls), repeats=5)
    assert seconds == statistics.median([5, 1, 3, 10, 0.5]) == 3
    assert result == 5 and calls == [0, 1, 2, 3, 4]


def test_decode_subtracts_the_prefill_from_both_sides(monkeypatch, loaded, small_task_set):
    """ours = median((DFS seconds - prefill) / forward calls), reference = (greedy - prefill) / (tokens - 1)."""
    model, encoder = loaded.model, loaded.encoder()
    tasks = small_task_set.tasks()
    prefill = {}  # prompt length -> the prefill seconds reported for it
    monkeypatch.setattr(bench, "_prefill_seconds",
                        lambda model, ids, repeats: prefill.setdefault(len(ids), 0.01 * len(prefill) + 0.01))
    spans = iter([2.0, 3.0, 2.5, 4.0, 1.5, 3.5])  # DFS, greedy, per task in turn

    def timed(model, function, repeats):
        return next(spans), function()
    monkeypatch.setattr(bench, "_timed", timed)
    result = bench.bench_decode(model, encoder, tasks, threshold=0.05, greedy_tokens=9, repeats=1)

    space = AnswerSpace.from_encoder(encoder)
    ours, reference = [], []
    for task, (dfs_seconds, greedy_seconds) in zip(tasks, [(2.0, 3.0), (2.5, 4.0), (1.5, 3.5)]):
        prompt = encoder.encode_prompt(task.train, task.test[0].input).ids
        calls = dfs_search(model, prompt, space, DfsSettings(0.05)).forward_calls
        assert calls > 0
        ours.append((dfs_seconds - prefill[len(prompt)]) / calls)
        reference.append((greedy_seconds - prefill[len(prompt)]) / 8)
    assert (result.ours, result.reference) == pytest.approx((statistics.median(ours), statistics.median(reference)))
    assert result.unit == "/token" and "3 prompts" in result.note and "T=0.05" in result.note


def test_greedy_generate_writes_the_tokens_it_is_timed_for(monkeypatch, loaded, small_task_set):
    generated = []
    generate = type(loaded.model).generate

    def counting_generate(self, inputs, **options):
        output = generate(self, inputs, **options)
        generated.append(output.shape[1] - inputs.shape[1])
        return output
    monkeypatch.setattr(type(loaded.model), "generate", counting_generate)
    result = bench.bench_decode(loaded.model, loaded.encoder(), small_task_set.tasks()[:1], greedy_tokens=7,
                                repeats=2)
    assert generated == [7, 7]  # min_new_tokens: eos does not end the timed run early
    assert result.ours > 0 and result.reference > 0


def test_search_runs_dfs_and_greedy_on_the_same_views(monkeypatch, loaded, small_task_set):
    seen = []
    sample = bench.Solver.sample

    def recording_sample(self, model, train, test_input, views, sampler, rng, **options):
        seen.append((sampler.kind, sampler.threshold, [view.key for view in views], rng.integers(1 << 30)))
        return sample(self, model, train, test_input, views, sampler, rng, **options)
    monkeypatch.setattr(bench.Solver, "sample", recording_sample)
    tasks = small_task_set.tasks()
    result = bench.bench_search(loaded.model, loaded.encoder(), tasks, threshold=0.2, augmentations=3)
    dfs = [entry[2:] for entry in seen if entry[0] == "dfs"]
    greedy = [entry[2:] for entry in seen if entry[0] == "greedy"]
    assert len(dfs) == len(greedy) == len(tasks) and dfs == greedy
    assert all(len(keys) == 3 for keys, _ in dfs)
    assert {entry[1] for entry in seen if entry[0] == "dfs"} == {0.2}
    assert result.ours > 0 and result.reference > 0 and "3 tasks x 3 augmentations" in result.note


def test_scoring_compares_the_same_answers_near_the_right_one(monkeypatch, loaded, small_task_set):
    encoder: TaskEncoder = loaded.encoder()
    calls = {"ours": [], "reference": []}
    score_answers, sequence_nll = bench.score_answers, bench.sequence_nll

    def ours(model, prompt, answers, space):
        calls["ours"].append((list(prompt), [list(answer) for answer in answers]))
        return score_answers(model, prompt, answers, space)

    def reference(model, prompt, answers, space):
        calls["reference"].append((list(prompt), [list(answer) for answer in answers]))
        return sequence_nll(model, prompt, answers, space)
    monkeypatch.setattr(bench, "score_answers", ours)
    monkeypatch.setattr(bench, "sequence_nll", reference)
    tasks = small_task_set.tasks()
    result = bench.bench_scoring(loaded.model, encoder, tasks, candidates=5, repeats=2)
    assert calls["ours"] == calls["reference"] and len(calls["ours"]) == 2 * len(tasks)
    for task, (prompt, answers) in zip(tasks, calls["ours"][::2]):
        assert prompt == list(encoder.encode_prompt(task.train, task.test[0].input).ids)
        right = task.test[0].output
        for answer in answers:
            grid = np.array([[int(symbol) for symbol in row] for row in encoder.decode_answer(answer)])
            assert grid.shape == right.shape and (grid != right).sum() <= 3
    assert result.ours > 0 and result.reference > 0 and "3 prompts x 5 answers" in result.note


def test_the_two_scorings_benchmarked_agree(loaded, small_task_set):
    """What the scoring benchmark times on both sides gives the same numbers."""
    encoder = loaded.encoder()
    space = AnswerSpace.from_encoder(encoder)
    task = small_task_set.tasks()[0]
    prompt = encoder.encode_prompt(task.train, task.test[0].input).ids
    answers = [encoder.encode_answer(task.test[0].output), encoder.encode_answer(task.test[0].input)]
    assert bench.score_answers(loaded.model, prompt, answers, space) == \
        pytest.approx(bench.sequence_nll(loaded.model, prompt, answers, space), rel=1e-4)


def test_run_benchmarks_picks_the_first_tasks_by_id_whose_prompts_fit(monkeypatch, model_folder, small_task_set):
    received = {}

    def fake(name):
        def benchmark(model, encoder, tasks, **options):
            received[name] = ([task.id for task in tasks], options)
            return BenchResult(name, 1.0, 2.0, "")
        return benchmark
    for name in bench.BENCHMARKS:
        monkeypatch.setitem(bench.BENCHMARKS, name, fake(name))
    encoder = load_model(model_folder, device="cpu").encoder()
    lengths = {task.id: len(encoder.encode_prompt(task.train, task.test[0].input, max_len=10**6))
               for task in small_task_set.tasks()}
    limit = sorted(lengths.values())[1]  # the two shortest prompts fit
    fitting = sorted(task_id for task_id, length in lengths.items() if length <= limit)
    lines = list(bench.run_benchmarks(str(model_folder), small_task_set, which=("decode", "scoring"), count=5,
                                      max_prompt=limit, threshold=0.3, device="cpu"))
    assert len(lines) == 3 and f"model {model_folder}" in lines[0] and "torch" in lines[0]
    assert received == {"decode": (fitting, {"threshold": 0.3, "probabilities": "full"}),
                        "scoring": (fitting, {"probabilities": "full"})}
    assert "ratio   0.50x" in lines[1]
    list(bench.run_benchmarks(str(model_folder), small_task_set, which=("search",), count=1, device="cpu",
                              probabilities="answer-mask"))
    assert received["search"] == (sorted(lengths)[:1], {"threshold": 0.09, "probabilities": "answer-mask"})
    received.clear()
    list(bench.run_benchmarks(str(model_folder), small_task_set, count=1, device="cpu"))
    assert set(received) == set(bench.BENCHMARKS) >= {"batched-search", "batched-scoring"}  # all by default


def test_the_bench_command_offers_every_benchmark_and_runs_all_by_default(monkeypatch, model_folder, capsys):
    from arc_kit.cli import main

    seen = {}

    def fake_run(model, tasks, **options):
        seen.update(options)
        yield "ran"
    monkeypatch.setattr(bench, "run_benchmarks", fake_run)
    assert main(["bench", "--model", str(model_folder), "--device", "cpu"]) == 0
    assert seen["which"] == list(bench.BENCHMARKS)
    assert main(["bench", "--model", str(model_folder), "--which", "batched-search", "batched-scoring"]) == 0
    assert seen["which"] == ["batched-search", "batched-scoring"]
    with pytest.raises(SystemExit):
        main(["bench", "--which", "nonsense"])


def test_batched_search_compares_grids_and_nlls_and_takes_turns(monkeypatch, loaded, small_task_set):
    order = []
    sample = bench.Solver.sample

    def recording_sample(self, model, train, test_input, views, sampler, rng, batched=None, **options):
        order.append(batched)
        candidates, stats = sample(self, model, train, test_input, views, sampler, rng, batched=batched, **options)
        if nudge and batched:  # a batched NLL off by 0.25 (or a grid lost) must show in the note
            if nudge == "nll":
                name = next(iter(candidates[0].generation_nlls))
                candidates[0].generation_nlls[name] += 0.25
            else:
                candidates = candidates[1:]
        return candidates, stats
    monkeypatch.setattr(bench.Solver, "sample", recording_sample)
    tasks = small_task_set.tasks()
    nudge = None
    result = bench.bench_batched_search(loaded.model, loaded.encoder(), tasks, threshold=0.05, augmentations=3)
    assert order == [True, False, False, True, True, False]  # the first mode alternates by test input
    assert "same candidates, largest NLL difference" in result.note
    assert float(result.note.rsplit("difference ", 1)[1]) < 1e-3
    nudge = "nll"
    assert "largest NLL difference 2.5e-01" in bench.bench_batched_search(loaded.model, loaded.encoder(), tasks,
                                                                         threshold=0.05, augmentations=3).note
    nudge = "grid"
    note = bench.bench_batched_search(loaded.model, loaded.encoder(), tasks, threshold=0.05, augmentations=3).note
    assert f"candidates differ on {len(tasks)} test input(s)" in note


def test_environment_names_the_machine_and_versions():
    line = bench.environment()
    assert torch.__version__ in line
    assert ("CPU (" in line) != torch.cuda.is_available()
