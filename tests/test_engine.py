"""The decode engine against transformers, for each model family it runs, and its weights against peft.

Tiny models of each family are built here (Llama with and without biases, tied embeddings, an
explicit head dim and Llama 3's rope scaling; Mistral with and without a sliding window; Qwen2
with its q/k/v biases; Qwen3 with its q/k norms). A search over two lanes (prompts of different
lengths, one with a guess, drafts right and wrong) runs on the engine with every engine call
recorded; each lane's sequence is rebuilt from the calls (a run fed at position p replaces
everything from p on: the rewind) and every NLL row the engine returned is checked against one full
transformers forward of that sequence. The same search through transformers' own forward
(``TransformersDecoder``, the oracle) must find the same answers, and the merged LoRA weights must
give what the peft model gives, adapter on and off.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from conftest import bigram_model

import arc_kit.method.engine as engine_module
import arc_kit.method.weights as weights_module
from arc_kit.method.answers import AnswerSpace, answer_log_probs
from arc_kit.method.drafts import AlignedAnswers, DraftSource, MostSupported, PromptLookup
from arc_kit.method.caches import capacity_bucket
from arc_kit.method.engine import Engine, lane_bucket, make_engine
from arc_kit.method.search import search
from arc_kit.method.transformers_forward import TransformersDecoder
from arc_kit.model.optimization import add_lora
from arc_kit.settings import SamplerSettings


VOCABULARY = 48
SHAPE = dict(vocab_size=VOCABULARY, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256, initializer_range=0.3)


def family_model(name: str):
    """A tiny random model of one family (``FAMILIES``), in eval mode."""
    from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                              Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

    configs = {
        "llama": lambda: LlamaForCausalLM(LlamaConfig(**SHAPE)),
        "llama-biases-tied-head-dim": lambda: LlamaForCausalLM(LlamaConfig(
            **SHAPE, attention_bias=True, mlp_bias=True, tie_word_embeddings=True, head_dim=12)),
        "llama3-rope": lambda: LlamaForCausalLM(LlamaConfig(**SHAPE, rope_parameters=dict(
            rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
            original_max_position_embeddings=16))),
        "mistral": lambda: MistralForCausalLM(MistralConfig(**SHAPE, sliding_window=None)),
        "mistral-window": lambda: MistralForCausalLM(MistralConfig(**SHAPE, sliding_window=7)),
        "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(**SHAPE)),
        "qwen3": lambda: Qwen3ForCausalLM(Qwen3Config(**SHAPE, head_dim=16)),
    }
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(sum(map(ord, name)))
        model = configs[name]()
    if hasattr(model.config, "_attn_implementation"):
        model.config._attn_implementation = "eager"  # the plainest reference
    return model.eval()


FAMILIES = ("llama", "llama-biases-tied-head-dim", "llama3-rope", "mistral", "mistral-window", "qwen2", "qwen3")
SPACE = AnswerSpace((0, 1, 2, 3, 4), 4, 7, "full")  # token 4 plays eos
SEARCH_SPACE = AnswerSpace((0, 1, 2, 3, 4), 4, 7, "answer-mask")  # renormalised: paths deep enough to search
SEARCH = SamplerSettings(threshold=0.02, drafts="all")  # the searches' DFS on it, every draft fed whole
PROMPTS = [[9, *range(20, 40), 5, 6], [9, 30, 31, 32, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]]


class Recorder:
    """Each lane's sequence as the engine's calls build it, and every (sequence, NLL row) it returned."""

    def __init__(self, engine, monkeypatch):
        self.sequences: list[list[int]] = []
        self.rows: list[tuple[list[int], np.ndarray]] = []
        self.runs: list[int] = []  # the length of every run fed
        self.rewinds = 0  # runs fed at a position before the lane's end: what was fed there is forgotten
        prefill, step, keep = engine.prefill, engine.step, engine.keep_lanes

        def recorded_prefill(lane, ids, logits_from):
            nlls = prefill(lane, ids, logits_from)
            self.sequences += [[] for _ in range(lane + 1 - len(self.sequences))]
            self.sequences[lane] = list(ids)
            self.rows += [(list(ids[:logits_from + offset]), row) for offset, row in enumerate(nlls)]
            return nlls

        def recorded_step(runs, positions):
            found = step(runs, positions)
            for lane, (run, position, rows) in enumerate(zip(runs, positions, found)):
                assert rows.shape == (len(run), engine.vocab_size)
                self.rewinds += position < len(self.sequences[lane])
                self.sequences[lane] = self.sequences[lane][:position] + list(run)  # the rewind, then the run
                self.rows += [(self.sequences[lane][:position + offset + 1], row) for offset, row in enumerate(rows)]
                self.runs.append(len(run))
            return found

        def recorded_keep(lanes):
            keep(lanes)
            self.sequences = [self.sequences[lane] for lane in lanes]

        monkeypatch.setattr(engine, "prefill", recorded_prefill)
        monkeypatch.setattr(engine, "step", recorded_step)
        monkeypatch.setattr(engine, "keep_lanes", recorded_keep)


class Constant(DraftSource):
    """Proposes the same tokens after every path."""

    def __init__(self, tokens):
        self.tokens = list(tokens)

    def supported(self, path, limit):
        return self.tokens[:limit], 0


def transformers_nlls(model, sequence, space: AnswerSpace) -> np.ndarray:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([sequence])).logits[0, -1]
    return (-answer_log_probs(logits, space.mask(logits.shape[-1]), space.probabilities)).double().numpy()


def assert_rows_match(model, rows, atol: float = 1e-4):
    """Every recorded NLL row equals one full transformers forward of its sequence."""
    for sequence, row in rows:
        expected = transformers_nlls(model, sequence, SEARCH_SPACE)
        assert np.array_equal(np.isinf(row), np.isinf(expected))
        np.testing.assert_allclose(row[np.isfinite(row)], expected[np.isfinite(expected)], rtol=0, atol=atol)


def assert_same_searches(found, expected, atol: float = 1e-4):
    for ours, theirs in zip(found, expected, strict=True):
        assert [c.ids for c in ours.completions] == [c.ids for c in theirs.completions]
        np.testing.assert_allclose([c.nll for c in ours.completions], [c.nll for c in theirs.completions],
                                   rtol=0, atol=atol)
        assert ours.forward_calls == theirs.forward_calls


def drafts_for_the_search():
    """Sources of long drafts, right and wrong: runs of every length, rewinds into them."""
    return [MostSupported([AlignedAnswers([[1, 2, 1, 2, 4], [0, 0, 0, 0, 4]], [4]),
                           PromptLookup(PROMPTS[0], min_length=1)]), Constant([3, 3, 1, 0, 2, 1])]


GUESSES = [None, [1, 2, 4]]


@pytest.mark.parametrize("family", [family if family in ("llama", "mistral-window", "qwen3")  # the quick loop's
                                    else pytest.param(family, marks=pytest.mark.slow) for family in FAMILIES])
def test_every_step_of_a_dfs_with_rewinds_matches_the_transformers_forward(family, monkeypatch):
    model = family_model(family)
    engine = make_engine(model)
    assert isinstance(engine, Engine)
    recorder = Recorder(engine, monkeypatch)
    results = search(engine, PROMPTS, SEARCH_SPACE, SEARCH, GUESSES)
    assert len(recorder.rows) > 20 and recorder.rewinds > 5  # guard: real work, with rewinds
    assert_rows_match(model, recorder.rows)
    assert_same_searches(results, search(TransformersDecoder(model), PROMPTS, SEARCH_SPACE, SEARCH, GUESSES))


@pytest.mark.parametrize("family", [family if family in ("llama", "llama-biases-tied-head-dim", "mistral-window",
                                                         "qwen3") else pytest.param(family, marks=pytest.mark.slow)
                                    for family in FAMILIES])
def test_every_run_of_a_speculative_dfs_matches_the_transformers_forward(family, monkeypatch):
    model = family_model(family)
    engine = make_engine(model)
    recorder = Recorder(engine, monkeypatch)
    results = search(engine, PROMPTS, SEARCH_SPACE, SEARCH.replace(draft_tokens=5), GUESSES,
                     drafts=drafts_for_the_search())
    assert len(set(recorder.runs)) > 3 and sum(result.draft_accepted for result in results) > 5  # guard: real runs
    assert_rows_match(model, recorder.rows)
    plain = search(engine, PROMPTS, SEARCH_SPACE, SEARCH, GUESSES)
    for drafted, single in zip(results, plain):
        assert [c.ids for c in drafted.completions] == [c.ids for c in single.completions]
        np.testing.assert_allclose([c.nll for c in drafted.completions], [c.nll for c in single.completions],
                                   rtol=0, atol=1e-4)
        assert drafted.forward_calls + drafted.draft_accepted == single.forward_calls  # the same positions explored


def test_the_eager_step_feeds_ragged_runs_to_lanes_in_any_row_order(monkeypatch):
    """Runs of different lengths in one step (each row computes and writes only its own tokens), after
    ``keep_lanes`` left lanes in rows out of their order: every NLL row equals transformers' forward."""
    model = family_model("llama")
    engine = Engine(model)
    recorder = Recorder(engine, monkeypatch)
    prompts = [PROMPTS[0], PROMPTS[1], PROMPTS[0][:9], PROMPTS[1][:6]]
    ends = [len(prompt) for prompt in prompts]
    engine.start(4, 40, SEARCH_SPACE)
    for lane, prompt in enumerate(prompts):
        engine.prefill(lane, prompt, len(prompt))
    engine.step([[1, 2, 3], [0], [2, 2], [3]], ends)
    engine.keep_lanes([1, 3])  # lane 3 moves into row 0, before lane 1's row 1
    engine.step([[1, 1, 1, 1], [2]], [ends[1] + 1, ends[3] + 1])
    engine.step([[0], [3, 2, 0]], [ends[1] + 2, ends[3] + 1])  # lane 0 rewound into its run
    engine.release()
    assert sorted(recorder.runs) == [1, 1, 1, 1, 2, 3, 3, 4]
    assert_rows_match(model, recorder.rows)


def test_transformers_forward_runs_the_speculative_search_as_the_engine_does(monkeypatch):
    """The oracle and fallback path: the same runs, rewinds and answers as the engine (its rows the model's own)."""
    model = family_model("mistral-window")  # a sliding window: transformers' own cache and mask handle it
    oracle = TransformersDecoder(model)
    recorder = Recorder(oracle, monkeypatch)
    settings = SEARCH.replace(draft_tokens=5)
    results = search(oracle, PROMPTS, SEARCH_SPACE, settings, GUESSES, drafts=drafts_for_the_search())
    assert len(set(recorder.runs)) > 3 and recorder.rewinds > 5
    assert_rows_match(model, recorder.rows)
    assert_same_searches(results, search(make_engine(model), PROMPTS, SEARCH_SPACE, settings, GUESSES,
                                         drafts=drafts_for_the_search()))


def test_a_prompt_longer_than_one_pass_is_prefilled_in_chunks_at_their_positions(monkeypatch):
    model = family_model("mistral-window")  # a window of 7: chunks must see the cache before them
    monkeypatch.setattr(engine_module, "PASS_TOKENS", 5)
    engine = make_engine(model)
    recorder = Recorder(engine, monkeypatch)
    search(engine, PROMPTS, SEARCH_SPACE, SEARCH, GUESSES)
    assert_rows_match(model, recorder.rows)


def test_every_pass_calls_the_step_callback_once():
    # a worker's heartbeat: the engine calls it once a model pass (a prefill, a step, a scoring pass)
    model = family_model("llama")
    calls = []
    engine = make_engine(model, on_step=lambda: calls.append(1))
    results = search(engine, PROMPTS, SEARCH_SPACE, SEARCH)
    assert sum(result.forward_calls for result in results) > 5  # guard: a real search
    assert len(calls) == len(PROMPTS) + engine.steps
    calls.clear()
    engine.score(PROMPTS, [[[1, 4], [2, 3, 4]]] * 2, SPACE, batch_size=2)
    assert len(calls) == 2 * 2  # per prompt: its pass, and its answers' pass
    calls.clear()
    oracle = TransformersDecoder(model, on_step=lambda: calls.append(1))
    search(oracle, PROMPTS[:1], SEARCH_SPACE, SEARCH)
    assert len(calls) == 1 + oracle.steps  # one lane: one model call a step


def test_transformers_forward_calls_the_model_without_deprecated_keywords(recwarn):
    # transformers 5.2x renamed past_key_values to cache (5.40 drops the old name): call_with_cache asks the
    # model's forward which one it takes; on the transformers installed here, no FutureWarning
    model = add_lora(family_model("llama"), 4, 8, False, adapter_name="ttt")
    oracle = TransformersDecoder(model)
    search(oracle, PROMPTS, SEARCH_SPACE, SEARCH, GUESSES)
    oracle.score(PROMPTS, [[[1, 4], [2, 3, 4]]] * 2, SPACE)
    assert not [warning for warning in recwarn if issubclass(warning.category, FutureWarning)]


def test_models_the_engine_cannot_run_fall_back_to_transformers_with_one_line(caplog):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    gelu = LlamaForCausalLM(LlamaConfig(**{**SHAPE, "hidden_act": "gelu"}))
    other = GPT2LMHeadModel(GPT2Config(vocab_size=VOCABULARY, n_embd=16, n_layer=1, n_head=2))
    for model, reason in ((gelu, "activation 'gelu'"), (other, "architecture 'gpt2'")):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="arc_kit.method.engine"):
            engine = make_engine(model)
        assert isinstance(engine, TransformersDecoder)
        assert len(caplog.records) == 1 and reason in caplog.records[0].getMessage()
        assert engine_module.FALLBACK_SLOWDOWN in caplog.records[0].getMessage()
    found = search(make_engine(other), PROMPTS, SEARCH_SPACE, SEARCH)  # and it searches
    assert any(result.completions for result in found)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert isinstance(make_engine(family_model("llama")), Engine)
    assert not caplog.records
    with pytest.raises(ValueError, match="unknown engine compile mode"):
        make_engine(family_model("llama"), "quick")


def test_a_model_whose_modules_are_patched_decodes_from_its_config_and_weights(monkeypatch):
    """unsloth patches modules (its own rotary embedding, attention forwards): the engine reads the rope, the
    attention scale and the shapes from the config, and only the weights from the modules."""
    model = family_model("llama3-rope")
    expected = [transformers_nlls(model, prompt, SPACE) for prompt in PROMPTS]

    class Refusing(torch.nn.Module):
        def forward(self, *args, **kwargs):
            raise AssertionError("the engine read a module's rope")

    model.model.rotary_emb = Refusing()
    for layer in model.model.layers:
        for name in ("scaling", "head_dim", "rotary_fn"):
            if hasattr(layer.self_attn, name):
                delattr(layer.self_attn, name)
    engine = make_engine(model)
    assert isinstance(engine, Engine)
    for prompt, row in zip(PROMPTS, expected):
        np.testing.assert_allclose(prefilled_nlls(engine, prompt), row, rtol=0, atol=1e-4)


def trained_adapter(model):
    """``model`` wrapped in a TTT-style LoRA (embeddings and head saved) after a few steps: B is not zero."""
    peft = add_lora(model, 4, 8, train_embeddings=True, adapter_name="ttt")
    optimizer = torch.optim.AdamW([p for p in peft.parameters() if p.requires_grad], lr=0.05)
    ids = torch.tensor([[9, *range(20, 36)]])
    for _ in range(3):
        peft(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return peft.eval()


def prefilled_nlls(engine, ids) -> np.ndarray:
    """The engine's next-token NLLs after each prompt token, from a lane of its own (released after)."""
    engine.start(1, len(ids) + 8, SPACE)
    try:
        return engine.prefill(0, ids, len(ids))[0]
    finally:
        engine.release()


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_merged_lora_weights_reproduce_the_peft_model_on_and_off(family):
    base = family_model(family)
    with torch.no_grad():
        untouched = transformers_nlls(base, PROMPTS[0], SPACE)
    peft = trained_adapter(base)
    lora = [module for name, module in peft.named_modules() if name.endswith("q_proj.lora_B.ttt")]
    assert lora and lora[0].weight.abs().sum() > 0  # guard: the adapter changes the model
    engine = make_engine(peft)
    assert isinstance(engine, Engine)
    tensors = [tensor.data_ptr() for tensor in engine.weights.tensors()]

    adapted = transformers_nlls(peft, PROMPTS[0], SPACE)
    finite = np.isfinite(adapted)
    assert np.abs(adapted[finite] - untouched[finite]).max() > 1e-2  # guard: training moved it
    np.testing.assert_allclose(prefilled_nlls(engine, PROMPTS[0]), adapted, rtol=0, atol=1e-4)
    with peft.disable_adapter():
        engine.refresh()
        np.testing.assert_allclose(prefilled_nlls(engine, PROMPTS[0]), untouched, rtol=0, atol=1e-4)
    engine.refresh()
    np.testing.assert_allclose(prefilled_nlls(engine, PROMPTS[0]), adapted, rtol=0, atol=1e-4)
    assert [tensor.data_ptr() for tensor in engine.weights.tensors()] == tensors  # refreshed in place


@pytest.mark.parametrize("family", ["llama-biases-tied-head-dim", "qwen3"])
def test_packed_matrices_decode_as_transformers_and_refresh_in_place(family, monkeypatch):
    """Every layer matrix packed for oneDNN (the threshold lowered for the tiny model): a speculative DFS's rows
    match transformers' forward, and a refresh with the adapter off packs the base weights into the same tensors."""
    monkeypatch.setattr(weights_module, "PACKED_ELEMENTS", 0)
    model = trained_adapter(family_model(family))
    engine = make_engine(model)
    layer = engine.weights.layers[0]
    assert all(matrix.layout == torch._mkldnn for matrix in (layer.qkv, layer.output, layer.gate_up, layer.down))
    recorder = Recorder(engine, monkeypatch)
    search(engine, PROMPTS, SEARCH_SPACE, SEARCH.replace(draft_tokens=5), GUESSES, drafts=drafts_for_the_search())
    assert len(set(recorder.runs)) > 3  # guard: ragged runs
    assert_rows_match(model, recorder.rows)
    tensors, adapted = [id(tensor) for tensor in engine.weights.tensors()], prefilled_nlls(engine, PROMPTS[0])
    with model.disable_adapter():
        untouched = transformers_nlls(model, PROMPTS[0], SPACE)
        assert np.abs(adapted - untouched)[np.isfinite(untouched)].max() > 1e-2  # guard: the refresh has work to do
        engine.refresh()
        np.testing.assert_allclose(prefilled_nlls(engine, PROMPTS[0]), untouched, rtol=0, atol=1e-4)
    assert [id(tensor) for tensor in engine.weights.tensors()] == tensors
    assert not Engine(model, compile=True).weights.pack  # a compiled step reads plain tensors


def test_the_solver_refreshes_its_engine_once_per_adapter_state(tmp_path):
    from arc_kit.settings import TEST_TIME_TRAINING, SolveSettings
    from arc_kit.method.solver import Solver
    from arc_kit.data.tasks import Pair, Task
    from arc_kit.text import TaskEncoder, Vocabulary

    model, _ = bigram_model()
    settings = SolveSettings(ttt=TEST_TIME_TRAINING.replace(steps=2, lora_rank=2, lora_alpha=4, optimizer="adamw"))
    heartbeat = []
    solver = Solver(model, TaskEncoder(Vocabulary()), settings, on_step=lambda: heartbeat.append(1))
    engine = solver.engine()
    assert isinstance(engine, Engine) and solver.engine() is engine and engine.weights.refreshes == 0
    engine.score([[1, 2, 3]], [[[4, 14]]], solver.space)
    assert heartbeat  # the solver's step callback is its engine's
    task = Task("t", (Pair([[1, 2]], [[2, 1]]), Pair([[3, 4]], [[4, 3]])), (Pair([[5, 6]], [[6, 5]]),))
    solver.adapt(task)
    assert solver.engine() is engine and engine.weights.refreshes == 1
    solver.engine()
    assert engine.weights.refreshes == 1  # the same adapter state: no second refresh
    with solver.base_model() as base:
        assert solver.engine(base) is engine and engine.weights.refreshes == 2
    solver.engine()
    assert engine.weights.refreshes == 3


def test_buckets():
    assert [lane_bucket(n) for n in (1, 2, 3, 4, 5, 8, 9, 15, 16)] == [1, 2, 4, 4, 8, 8, 16, 16, 16]
    assert [capacity_bucket(n) for n in (1, 256, 257, 600, 1024, 1025, 2048, 2049, 8192)] == [
        256, 256, 512, 1024, 1024, 2048, 2048, 3072, 8192]


@pytest.mark.processes  # inductor compiles in worker processes of its own
@pytest.mark.slow
def test_the_compiled_step_pads_runs_to_their_bucket_and_equals_the_eager_step_with_one_graph_per_bucket():
    """``torch.compile(fullgraph=True)`` (a graph break would raise) on runs of several lengths, rewinds into them
    included: the compiled step pads each run to a power of two and gives the eager step's NLLs, with no more than
    one graph per (lane bucket, run bucket), none from step to step or per capacity; lanes moved into the smaller
    bucket as eagerly. (Their padding differs, which no position a DFS feeds can see.)"""
    from torch._dynamo.utils import counters
    from transformers import Qwen3Config, Qwen3ForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # the most to trace (q/k norms), one layer: compiling costs less
        model = Qwen3ForCausalLM(Qwen3Config(**{**SHAPE, "num_hidden_layers": 1}, head_dim=16)).eval()
    torch._dynamo.reset()
    counters.clear()
    compiled, eager = Engine(model, compile=True), Engine(model)
    prompts = [*PROMPTS, PROMPTS[0][:9]]
    ends = [len(prompt) for prompt in prompts]
    e0, e1, e2 = ends
    steps = [  # (runs, positions) of the live lanes; then (lanes kept,); every position fed on the lane's path
        ([[1], [2], [3]], [e0, e1, e2]),  # lane bucket 4, runs bucket 1
        ([[2], [0], [1]], [300, e1 + 1, e2]),  # the same graph at a capacity bucket further; lane 2 rewound
        ([[1, 2, 3], [0], [2, 2]], [e0, e1 + 2, e2 + 1]),  # runs bucket 4; lane 0 rewound
        ([[3], [1], [0]], [e0 + 1, e1 + 3, e2 + 3]),  # lane 0 rewound into its run; runs bucket 1
        ([[2, 0], [1, 1, 1, 1, 1], [3]], [e0 + 2, e1 + 4, e2 + 4]),  # runs bucket 8
        ((0, 2),),  # a lane bucket of 2
        ([[0, 1, 2], [1]], [e0 + 3, e2 + 5]),  # runs bucket 4
        ([[2, 1], [0, 0, 0]], [e0 + 6, e2 + 6]),
        ([[2], [0]], [e0 + 1, e2 + 9]),  # runs bucket 1
    ]
    found, graphs = [], []  # graphs: the compiled engine's count after each of its steps
    for engine in (eager, compiled):
        engine.start(3, 40, SPACE)  # a lane bucket of 4
        rows = [engine.prefill(lane, prompt, len(prompt)) for lane, prompt in enumerate(prompts)]
        for step in steps:
            if len(step) == 1:
                engine.keep_lanes(step[0])
                continue
            rows += engine.step(*step)
            graphs.append(counters["stats"]["unique_graphs"])
        engine.release()
        found.append(rows)
    for fast, slow in zip(*found):
        np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-5)
    compiled_graphs = graphs[len(graphs) // 2:]
    assert compiled_graphs[0] > 0 and compiled_graphs[1] == compiled_graphs[0]  # a capacity further: no graph
    assert compiled_graphs[-1] <= 5  # (4, 1), (4, 4), (4, 8), (2, 4), (2, 1) at most
    torch._dynamo.reset()


def test_every_command_that_decodes_offers_the_engines_compile_mode_and_no_choice_of_engine(capsys):
    from arc_kit.cli import main

    for command in (["solve"], ["dry-run"], ["ablation"], ["samplers"], ["kaggle", "run"], ["bench"]):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        text = capsys.readouterr().out
        assert "--engine-compile" in text and "--engine " not in text and "--batched" not in text, command


def test_a_step_that_cannot_be_compiled_goes_on_eagerly_with_one_line(monkeypatch, caplog):
    model = family_model("llama")
    compiled, eager = Engine(model, compile=True), Engine(model)
    calls = []

    def broken(*arguments):
        calls.append(1)
        raise RuntimeError("triton: this GPU is too old\nmore detail")

    monkeypatch.setattr(compiled, "_compiled", broken)
    with caplog.at_level(logging.WARNING, logger="arc_kit.method.engine"):
        found = search(compiled, PROMPTS, SEARCH_SPACE, SamplerSettings(threshold=0.05))
    expected = search(eager, PROMPTS, SEARCH_SPACE, SamplerSettings(threshold=0.05))
    assert calls == [1] and not compiled.compiled
    assert [record.getMessage() for record in caplog.records] == [
        "compiling the decode step failed (RuntimeError: triton: this GPU is too old); going on with the eager step"]
    for fast, slow in zip(found, expected):
        assert [c.ids for c in fast.completions] == [c.ids for c in slow.completions] and fast.forward_calls > 0
    out_of_memory = Engine(model, compile=True)
    monkeypatch.setattr(out_of_memory, "_compiled", lambda *arguments: (_ for _ in ()).throw(
        torch.OutOfMemoryError("CUDA out of memory (a test's stand-in)")))
    with pytest.raises(torch.OutOfMemoryError):  # left to the search's halving, never taken for a compiler's failure
        search(out_of_memory, PROMPTS, SEARCH_SPACE, SamplerSettings(threshold=0.05))
    assert out_of_memory.compiled
