"""bench.py: the figures are what they claim to be (medians, prefill subtracted, the same work on both sides).

Timings are replaced by fixed numbers where a formula is checked; the model is the conftest bigram model.
"""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
import torch

from arc_kit.data.augmentation import Augmentation
from arc_kit.experiments import bench
from arc_kit.experiments.bench import BenchResult
from arc_kit.method.answers import AnswerSpace
from arc_kit.method.search import search
from arc_kit.settings import SamplerSettings
from arc_kit.model.loading import load_model
from arc_kit.run import expectations
from arc_kit.text import TaskEncoder


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
    """ours = median((DFS seconds - the engine's prefill) / forward calls), reference = (greedy - the model's
    prefill) / (tokens - 1)."""
    model, encoder = loaded.model, loaded.encoder()
    tasks = small_task_set.tasks()
    prefill, engine_prefill = {}, {}  # prompt length -> the prefill seconds reported for it
    monkeypatch.setattr(bench, "_prefill_seconds",
                        lambda model, ids, repeats: prefill.setdefault(len(ids), 0.01 * len(prefill) + 0.01))
    monkeypatch.setattr(bench, "_engine_prefill_seconds", lambda engine, ids, space, repeats: engine_prefill.setdefault(
        len(ids), 0.003 * len(engine_prefill) + 0.002))
    spans = iter([2.0, 3.0, 2.5, 4.0, 1.5, 3.5])  # DFS, greedy, per task in turn

    def timed(model, function, repeats):
        return next(spans), function()
    monkeypatch.setattr(bench, "_timed", timed)
    result = bench.bench_decode(model, encoder, tasks, threshold=0.05, greedy_tokens=9, repeats=1)

    space = AnswerSpace.from_encoder(encoder)
    ours, reference = [], []
    for task, (dfs_seconds, greedy_seconds) in zip(tasks, [(2.0, 3.0), (2.5, 4.0), (1.5, 3.5)]):
        prompt = encoder.encode_prompt(task.train, task.test[0].input).ids
        calls = search(bench.make_engine(model), [prompt], space, SamplerSettings(threshold=0.05))[0].forward_calls
        assert calls > 0
        ours.append((dfs_seconds - engine_prefill[len(prompt)]) / calls)
        reference.append((greedy_seconds - prefill[len(prompt)]) / 8)
    assert (result.ours, result.reference) == pytest.approx((statistics.median(ours), statistics.median(reference)))
    assert result.unit == "/token" and "3 prompts" in result.note and "T=0.05" in result.note
    assert "on the engine" in result.note


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

    def recording_sample(self, model, train, test_input, views, sampler, **options):
        seen.append((sampler.kind, sampler.threshold, [view.key for view in views]))
        return sample(self, model, train, test_input, views, sampler, **options)
    monkeypatch.setattr(bench.Solver, "sample", recording_sample)
    tasks = small_task_set.tasks()
    result = bench.bench_search(loaded.model, loaded.encoder(), tasks, threshold=0.2, augmentations=3)
    dfs = [entry[2:] for entry in seen if entry[0] == "dfs"]
    greedy = [entry[2:] for entry in seen if entry[0] == "greedy"]
    assert len(dfs) == len(greedy) == len(tasks) and dfs == greedy
    assert all(len(keys) == 3 for keys, in dfs)
    assert {entry[1] for entry in seen if entry[0] == "dfs"} == {0.2}
    assert result.ours > 0 and result.reference > 0 and "3 tasks x 3 augmentations" in result.note


def test_scoring_compares_the_same_answers_near_the_right_one(monkeypatch, loaded, small_task_set):
    encoder: TaskEncoder = loaded.encoder()
    calls = {"ours": [], "reference": []}
    make_engine, sequence_nll = bench.make_engine, bench.sequence_nll

    def engine_of(model):
        engine = make_engine(model)
        score = engine.score

        def ours(prompts, answers, space):
            assert len(prompts) == 1
            calls["ours"].append((list(prompts[0]), [list(answer) for answer in answers[0]]))
            return score(prompts, answers, space)
        engine.score = ours
        return engine

    def reference(model, prompt, answers, space):
        calls["reference"].append((list(prompt), [list(answer) for answer in answers]))
        return sequence_nll(model, prompt, answers, space)
    monkeypatch.setattr(bench, "make_engine", engine_of)
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
    assert bench.make_engine(loaded.model).score([prompt], [answers], space)[0] == \
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
    list(bench.run_benchmarks(str(model_folder), small_task_set, which=("search", "engine"), count=1, device="cpu",
                              probabilities="answer-mask"))
    assert received["search"] == (sorted(lengths)[:1], {"threshold": 0.09, "probabilities": "answer-mask"})
    assert received["engine"] == (sorted(lengths)[:1], {"probabilities": "answer-mask", "label": str(model_folder),
                                                        "compile": "auto"})
    received.clear()
    list(bench.run_benchmarks(str(model_folder), small_task_set, count=1, device="cpu"))
    # all by default, but drafts (hours on a CPU: asked for by name)
    assert set(received) == set(bench.DEFAULT_BENCHMARKS) == {"decode", "search", "scoring", "engine"}
    assert set(bench.BENCHMARKS) - set(bench.DEFAULT_BENCHMARKS) == {"drafts"}
    assert list(bench.DEFAULT_BENCHMARKS)[-1] == "engine"  # its last line ends the output


def test_the_bench_command_offers_every_benchmark_and_runs_all_by_default(monkeypatch, model_folder, capsys):
    from arc_kit.cli import main

    seen = {}

    def fake_run(model, tasks, **options):
        seen.update(options)
        yield "ran"
    monkeypatch.setattr(bench, "run_benchmarks", fake_run)
    assert main(["bench", "--model", str(model_folder), "--device", "cpu"]) == 0
    assert seen["which"] == list(bench.DEFAULT_BENCHMARKS)
    assert main(["bench", "--model", str(model_folder), "--which", "scoring", "drafts"]) == 0
    assert seen["which"] == ["scoring", "drafts"]
    for gone in (["--which", "batched-search"], ["--which", "lanes"], ["--engine", "reference"]):
        with pytest.raises(SystemExit):  # one search, one engine: nothing left to compare them with
            main(["bench", *gone])


def test_environment_names_the_machine_and_versions():
    line = bench.environment()
    assert torch.__version__ in line
    assert ("CPU (" in line) != torch.cuda.is_available()


def test_the_bandwidth_floor_is_weights_and_cache_over_bandwidth():
    """Llama-3.2-3B in bf16 on an L4: 28 layers x 2 x 8 KV heads x 128 x 2 bytes = 114,688 bytes per token."""
    from transformers import LlamaConfig

    config = LlamaConfig(hidden_size=3072, num_hidden_layers=28, num_attention_heads=24, num_key_value_heads=8,
                         head_dim=128)
    per_token = expectations.kv_bytes_per_token(config, 2)
    assert per_token == 114_688
    l4 = expectations.device_bandwidth("NVIDIA L4")
    floor = expectations.decode_floor_seconds(6_425_000_000, 8192, per_token, l4)
    assert floor == pytest.approx((6_425_000_000 + 8192 * 114_688) / 300e9)  # about 24.5 ms a step
    assert expectations.device_bandwidth("NVIDIA H100 80GB HBM3") == 3.35e12
    assert expectations.device_bandwidth("NVIDIA H100 PCIe") == 2.0e12
    assert expectations.device_bandwidth("Tesla T4") == 3.2e11
    assert expectations.device_bandwidth("a card nobody has heard of") is None


def test_the_floor_counts_what_a_real_cache_and_model_hold(loaded):
    """kv_bytes_per_token and parameter_bytes against the bytes of a real cache and of the model's state."""
    model = loaded.model
    with torch.no_grad():
        cache = model(input_ids=torch.tensor([[1, 2, 3, 4, 5]]), use_cache=True).past_key_values
    held = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
    assert expectations.kv_bytes_per_token(model.config, 4) * 5 == held
    unique = {tensor.data_ptr(): tensor.nbytes for tensor in model.state_dict().values() if tensor.is_floating_point()}
    assert expectations.parameter_bytes(model) == sum(unique.values())
    note = bench.floor_note(model, [100, 300, 200], 1e-3, "NVIDIA L4")
    floor = (expectations.parameter_bytes(model) + 200 * expectations.kv_bytes_per_token(model.config, 4)) / 300e9
    assert f"bandwidth floor {floor * 1e3:.3f} ms/token at 300 GB/s (NVIDIA L4)" in note
    assert f"DFS token {1e-3 / floor:.1f}x the floor" in note
    assert bench.floor_note(model, [100], 1e-3, "Mystery GPU") == \
        "bandwidth floor unknown: no bandwidth on record for Mystery GPU"


def test_the_engine_benchmark_ends_with_the_overhead_speed_up_and_compares_like_with_like(loaded, small_task_set):
    import re

    result = bench.bench_engine(loaded.model, loaded.encoder(), small_task_set.tasks(), steps=2, warmup=1,
                                label="bigram")
    lines = result.lines()
    assert re.fullmatch(r"engine speed-up: \d+\.\d\dx \(overhead, width 64, 16 lanes\)", lines[-1])
    assert sum(line.startswith("engine speed-up:") for line in lines) == 1
    assert lines[-2].startswith("engine speed-up at real width: ") and lines[-2].endswith("x (16 lanes)")
    assert lines[0].startswith("engine: 16 lanes, bigram: engine ") and "width 64, 2 layers: engine" in lines[1]
    assert "width 64, 2 layers, prompts cut to 64 tokens: engine" in lines[2] and len(result.rows) == 3
    assert "prompts of 64-64 tokens" in result.rows[2][3] and "prompts of 64-64" not in result.rows[1][3]
    overhead = float(lines[-1].split("x ")[0].rsplit(" ", 1)[1])  # the overhead line is the short prompts' row
    assert overhead == round(result.rows[2][2] / result.rows[2][1], 2)
    for name, ours, theirs, note in result.rows:
        assert ours > 0 and theirs > 0 and "rank-32 test-time LoRA" in note
        difference = float(note.rsplit("largest NLL difference ", 1)[1])
        assert difference < 1e-4  # the engine and transformers' forward were fed the same tokens and agree
    assert loaded.model.__class__.__name__ == "LlamaForCausalLM" and not hasattr(loaded.model, "peft_config")


def test_the_engine_benchmark_prompts_are_the_solvers_augmented_views(loaded, small_task_set):
    from arc_kit.experiments.engine_bench import lane_prompts

    encoder, task = loaded.encoder(), small_task_set.tasks()[0]
    prompts = lane_prompts(encoder, task)
    assert len(prompts) == 16 and len({tuple(prompt) for prompt in prompts}) > 8
    views = Augmentation.inference_set(np.random.default_rng(0), len(task.train), 16)
    assert prompts[5] == list(encoder.encode_prompt(views[5].apply_pairs(task.train),
                                                    views[5].apply_grid(task.test[0].input)).ids)


def test_the_gpu_throughput_lines_count_tokens_and_the_floor(loaded, small_task_set, monkeypatch):
    """What the engine benchmark prints on a GPU, computed here on the CPU with a named card's bandwidth."""
    from arc_kit.experiments import engine_bench

    engine = bench.make_engine(loaded.model)
    prompts = engine_bench.lane_prompts(loaded.encoder(), small_task_set.tasks()[0])
    timed = iter([({"engine": 0.004}, 0.0), ({"engine": 0.008}, 0.0)])  # one lane, then 16
    monkeypatch.setattr(engine_bench, "_timed_steps", lambda engines, chosen, *rest: next(timed))
    space = AnswerSpace.from_encoder(loaded.encoder())
    name = "NVIDIA H100 80GB HBM3"
    lines = [measured.line(name) for measured in engine_bench.throughput(engine, prompts, space, 2, 1,
                                                                             expectations.device_bandwidth(name))]
    decode_bytes = sum(t.numel() * t.element_size() for t in engine.weights.tensors())
    per_token = expectations.kv_bytes_per_token(loaded.model.config, 4)
    floor = expectations.decode_floor_seconds(decode_bytes, sum(map(len, prompts)), per_token, 3.35e12)
    assert lines[0].startswith("engine on NVIDIA H100 80GB HBM3: 1 lane(s), 250 tokens/s per process (4.000 ms/step)")
    assert lines[1].startswith("engine on NVIDIA H100 80GB HBM3: 16 lane(s), 2000 tokens/s per process")
    assert f"{0.008 / floor:.1f}x the bandwidth floor" in lines[1]
    monkeypatch.undo()  # timed for real now, on the CPU
    name = "a card nobody has heard of"
    unknown = [measured.line(name) for measured in engine_bench.throughput(engine, prompts, space, 2, 1,
                                                                               expectations.device_bandwidth(name))]
    assert len(unknown) == 2 and not any("floor" in line for line in unknown)
    assert "1 lane(s)" in unknown[0] and "16 lane(s)" in unknown[1]


def test_the_drafts_benchmark_compares_every_setting_with_none_on_the_same_views(loaded, small_task_set, monkeypatch):
    from arc_kit.experiments import drafts_bench

    calls = []
    sample = drafts_bench.Solver.sample

    def recorded(self, model, train, test_input, views, sampler, **options):
        calls.append((sampler.drafts, tuple(view.key for view in views)))
        return sample(self, model, train, test_input, views, sampler, **options)

    monkeypatch.setattr(drafts_bench.Solver, "sample", recorded)
    tasks = list(small_task_set.tasks())[:2]
    seen = []
    result = drafts_bench.bench_drafts(loaded.model, loaded.encoder(), tasks, threshold=0.05, augmentations=3,
                                       progress=lambda figures: seen.append(figures.inputs))
    inputs = sum(len(task.test_inputs) for task in tasks)
    assert result.inputs == inputs and len(calls) == 4 * inputs and seen == list(range(1, inputs + 1))
    for start in range(0, len(calls), 4):  # every setting on the same views; which goes first rotates
        assert len({views for _, views in calls[start:start + 4]}) == 1 and len(calls[start][1]) == 3
    assert [drafts for drafts, _ in calls[:4]] == ["none", "prompt", "all", "auto"]
    assert [drafts for drafts, _ in calls[4:8]] == ["prompt", "all", "auto", "none"]
    lines = result.lines()
    plain, best, auto = result.totals["none"], result.totals["all"], result.totals["auto"]
    assert plain.fed == 0 and 0 < best.accepted <= best.fed and 0 < best.steps < plain.steps
    assert auto.accepted <= auto.fed and auto.steps <= plain.steps
    assert not best.differing and not result.totals["prompt"].differing and not auto.differing
    assert lines[-1] == f"auto: {plain.steps / auto.steps:.2f}x fewer steps, {plain.seconds / auto.seconds:.2f}x wall"
    assert "same candidates" in lines[-2] and "3 augmentations" in lines[0]
    capped = drafts_bench.bench_drafts(loaded.model, loaded.encoder(), tasks[:1], threshold=0.05, augmentations=2,
                                       modes=("none", "all"), draft_tokens=(1, 3))
    assert list(capped.totals) == ["none", "all@1", "all@3"] and capped.lines()[-1].startswith("all@3: ")
    assert capped.totals["all@1"].fed <= capped.totals["all@1"].steps  # one draft token a step at most


def test_the_drafts_benchmark_takes_the_shortest_tasks_and_its_augmentations(monkeypatch, model_folder,
                                                                            small_task_set):
    received = {}

    def fake(model, encoder, tasks, **options):
        received.update(tasks=[task.id for task in tasks], **options)
        return BenchResult("drafts", 1.0, 2.0, "")

    monkeypatch.setitem(bench.BENCHMARKS, "drafts", fake)
    list(bench.run_benchmarks(str(model_folder), small_task_set, which=("drafts",), count=2, device="cpu",
                              augmentations=5))
    encoder = load_model(model_folder, device="cpu").encoder()
    assert received["tasks"] == list(bench.shortest_tasks(small_task_set, encoder, 2).ids)
    assert received["augmentations"] == 5 and received["threshold"] == 0.09


def test_candidates_differ_when_their_grids_or_views_do_and_otherwise_by_their_largest_nll_gap():
    from arc_kit.experiments.drafts_bench import candidate_difference

    plain = {"a": {"v1": 1.0, "v2": 2.0}, "b": {"v1": 3.0}}
    assert candidate_difference({"a": {"v1": 1.0, "v2": 2.5}, "b": {"v1": 2.9}}, plain) == pytest.approx(0.5)
    assert candidate_difference({"a": {"v1": 1.0, "v2": 2.0}}, plain) is None  # a grid missing
    assert candidate_difference({"a": {"v1": 1.0}, "b": {"v1": 3.0}}, plain) is None  # a view missing
    assert candidate_difference({}, {}) == 0.0
