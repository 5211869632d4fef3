"""The decode engine over bitsandbytes 4-bit weights, against transformers' forward of the same 4-bit model.

Tiny models of each family (``test_engine.family_model``) are saved and loaded back with
``BitsAndBytesConfig(load_in_4bit=True)`` on the CPU: nf4 and fp4, with and without double
quantization, compute dtype float32, bfloat16 or float16. The engine and transformers then run the same
bitsandbytes operation (``matmul_4bit``: on the CPU, the weight dequantized and one matmul) on the
same inputs, so in a float32 compute dtype they agree to float rounding: the dense tests' 1e-4 on
the NLLs holds. In a 16-bit compute dtype each matmul's input is rounded to 16 bits, and two inputs
that differ in float32 rounding (the engine folds the attention scale into the queries, runs
the RMS norm as one call and sums the LoRA of a group in one product) can round to neighbouring
16-bit values: 2**-8 relative on a bfloat16 element, which reaches the logits at about that relative
size. These tiny random models' logits reach about 5.6, so one such step moves an NLL by up to
about 2e-2 (2.1e-2 seen once); held to 5e-2, two steps.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from test_engine import (GUESSES, PROMPTS, SEARCH, SEARCH_SPACE, SHAPE, SPACE, Recorder, assert_rows_match,
                         assert_same_searches, family_model, prefilled_nlls, trained_adapter, transformers_nlls)

from arc_kit.method.engine import Engine, make_engine
from arc_kit.method.experts import Candidate, select
from arc_kit.method.four_bit import FourBitProjection
from arc_kit.method.search import search
from arc_kit.method.transformers_forward import TransformersDecoder
from arc_kit.method.weights import owned_tensors, unsupported_reason
from arc_kit.model.loading import keep_four_bit_layout
from arc_kit.settings import SamplerSettings

pytest.importorskip("bitsandbytes")

QUANTIZATIONS = {  # name: (quant type, double quantization, compute dtype)
    "nf4-double-f32": ("nf4", True, torch.float32),
    "nf4-f32": ("nf4", False, torch.float32),
    "fp4-f32": ("fp4", False, torch.float32),
    "fp4-double-f32": ("fp4", True, torch.float32),
    "nf4-double-bf16": ("nf4", True, torch.bfloat16),
    "fp4-f16": ("fp4", False, torch.float16),
}


def tolerance(quantization: str) -> float:
    """The NLLs' tolerance (module docstring): float rounding in float32, two 16-bit rounding steps otherwise."""
    return 1e-4 if QUANTIZATIONS[quantization][2] == torch.float32 else 5e-2


def load_four_bit(folder, quantization: str):
    """The model saved in ``folder`` loaded in 4 bits on the CPU, as transformers quantizes it."""
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    quant_type, double, compute = QUANTIZATIONS[quantization]
    config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=quant_type, bnb_4bit_use_double_quant=double,
                                bnb_4bit_compute_dtype=compute)
    model = AutoModelForCausalLM.from_pretrained(folder, quantization_config=config, device_map="cpu")
    model.config._attn_implementation = "eager"  # the plainest reference
    return keep_four_bit_layout(model).eval()  # as the kit loads it: no repacking on an AVX512-BF16 CPU


@pytest.fixture(scope="module")
def four_bit(tmp_path_factory):
    """``four_bit(family, quantization)``: that family's tiny model in 4 bits (made once per module)."""
    folders, made = {}, {}

    def build(family: str, quantization: str):
        if family not in folders:
            folders[family] = tmp_path_factory.mktemp(family)
            family_model(family).save_pretrained(folders[family])
        return load_four_bit(folders[family], quantization)

    def four_bit(family: str, quantization: str, fresh: bool = False):
        if fresh:
            return build(family, quantization)
        if (family, quantization) not in made:
            made[family, quantization] = build(family, quantization)
        return made[family, quantization]

    return four_bit


def seeded_adapter(model):
    """``test_engine.trained_adapter`` with a fixed seed for the adapter's initialisation (the guards stay met)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return trained_adapter(model)


SLOW = pytest.mark.slow


@pytest.mark.parametrize("family, quantization", [
    ("qwen2", "nf4-f32"), pytest.param("mistral-window", "fp4-f32", marks=SLOW),
    pytest.param("llama", "nf4-double-f32", marks=SLOW),
    pytest.param("qwen3", "fp4-double-f32", marks=SLOW),
    pytest.param("llama-biases-tied-head-dim", "nf4-double-bf16", marks=SLOW),
    pytest.param("qwen3", "fp4-f16", marks=SLOW)])
def test_every_step_of_a_4_bit_dfs_with_rewinds_matches_the_transformers_forward(family, quantization, four_bit,
                                                                                monkeypatch):
    model = four_bit(family, quantization)
    assert unsupported_reason(model) is None
    engine = make_engine(model)
    assert isinstance(engine, Engine)
    assert any(isinstance(layer.qkv, FourBitProjection) for layer in engine.weights.layers)  # guard: 4-bit path
    recorder = Recorder(engine, monkeypatch)
    results = search(engine, PROMPTS, SEARCH_SPACE, SEARCH, GUESSES)
    assert len(recorder.rows) > 20 and recorder.rewinds > 5  # guard: real work, with rewinds
    assert_rows_match(model, recorder.rows, tolerance(quantization))
    oracle = search(TransformersDecoder(model), PROMPTS, SEARCH_SPACE, SEARCH, GUESSES)
    assert_same_searches(results, oracle, tolerance(quantization))


def test_the_engine_reads_the_models_own_packed_weights_and_copies_no_matrix(four_bit):
    model = four_bit("qwen2", "nf4-double-f32")
    engine = make_engine(model)
    packed = {module.weight.data_ptr() for module in model.modules()
              if getattr(getattr(module, "weight", None), "quant_state", None) is not None}
    read = {part.data.data_ptr() for layer in engine.weights.layers for projection in layer.parts()
            if isinstance(projection, FourBitProjection) for part in projection.parts}
    assert len(packed) == 7 * 2 and read == packed  # every 4-bit layer, read in place
    held = {tensor.data_ptr() for tensor in engine.weights.tensors()}
    assert packed <= held  # the packed weights are among the tensors a compiled step holds at fixed addresses
    # without an adapter the engine's own copies per layer are vectors (norms, biases): no matrix, dequantized or not
    assert all(tensor.dim() == 1 for layer in engine.weights.layers for tensor in owned_tensors(layer.parts()))


@pytest.mark.parametrize("family, quantization", [("llama", "nf4-double-f32"),
                                                   pytest.param("qwen2", "nf4-double-bf16", marks=SLOW)])
def test_a_lora_over_4_bit_weights_reproduces_the_peft_model_on_off_and_after_refresh(family, quantization, four_bit,
                                                                                     monkeypatch):
    base = four_bit(family, quantization, fresh=True)  # peft wraps it in place
    untouched = transformers_nlls(base, PROMPTS[0], SPACE)
    peft = seeded_adapter(base)  # QLoRA: the adapter trained over the 4-bit weights
    engine = make_engine(peft)
    assert isinstance(engine, Engine)
    assert engine.weights.layers[0].qkv.up.abs().sum() > 0  # guard: the LoRA is read, and not zero
    tensors = [tensor.data_ptr() for tensor in engine.weights.tensors()]
    atol = tolerance(quantization)

    adapted = transformers_nlls(peft, PROMPTS[0], SPACE)
    finite = np.isfinite(adapted)
    assert np.abs(adapted[finite] - untouched[finite]).max() > 1e-2  # guard: training moved it
    np.testing.assert_allclose(prefilled_nlls(engine, PROMPTS[0]), adapted, rtol=0, atol=atol)
    with peft.disable_adapter():
        engine.refresh()
        np.testing.assert_allclose(prefilled_nlls(engine, PROMPTS[0]), untouched, rtol=0, atol=atol)
    with torch.no_grad():  # the adapter changes (as a second task's training would): refresh reads it in place
        for name, parameter in peft.named_parameters():
            if "lora_B" in name:
                parameter.mul_(-1.5)
    changed = transformers_nlls(peft, PROMPTS[0], SPACE)
    assert np.abs(changed[finite] - adapted[finite]).max() > 1e-2  # guard
    engine.refresh()
    np.testing.assert_allclose(prefilled_nlls(engine, PROMPTS[0]), changed, rtol=0, atol=atol)
    assert [tensor.data_ptr() for tensor in engine.weights.tensors()] == tensors  # refreshed in place
    recorder = Recorder(engine, monkeypatch)  # a search with rewinds under the adapter, row by row
    search(engine, PROMPTS, SEARCH_SPACE, SamplerSettings(threshold=0.05), GUESSES)
    assert len(recorder.rows) > 10 and recorder.rewinds > 2
    assert_rows_match(peft, recorder.rows, atol)


@pytest.mark.slow
def test_dfs_and_product_of_experts_choose_what_transformers_forward_chooses_in_4_bits(four_bit):
    model = seeded_adapter(four_bit("qwen3", "nf4-double-f32", fresh=True))
    chosen, tables = {}, {}
    for engine in (make_engine(model), TransformersDecoder(model)):
        searches = search(engine, PROMPTS, SEARCH_SPACE, SEARCH)
        answers = sorted({tuple(c.ids) for found in searches for c in found.completions})
        assert len(answers) >= 3  # guard: something to choose from
        views = engine.score(PROMPTS, [[list(answer) for answer in answers]] * len(PROMPTS), SPACE)
        table = np.stack(views, axis=1)  # (answers, views): the prompts play the augmented views
        candidates = [Candidate(np.array([answer]), scoring_nlls=list(row)) for answer, row in zip(answers, table)]
        chosen[engine.kind] = [answers[index] for index in select(candidates, "product", count=2)]
        tables[engine.kind] = table
    assert chosen["engine"] == chosen["transformers"]
    np.testing.assert_allclose(tables["engine"], tables["transformers"], rtol=0, atol=1e-4)


def test_quantizations_the_engine_cannot_run_fall_back_to_transformers_with_one_line(caplog):
    from transformers import BitsAndBytesConfig

    cases = [(BitsAndBytesConfig(load_in_8bit=True), "8-bit bitsandbytes weights"),
             ({"quant_method": "gptq", "bits": 4}, "gptq quantized weights"),
             ({"quant_method": "bitsandbytes", "load_in_8bit": True}, "8-bit bitsandbytes weights")]
    for quantization, reason in cases:
        model = family_model("llama")
        model.config.quantization_config = quantization
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="arc_kit.method.engine"):
            engine = make_engine(model)
        assert isinstance(engine, TransformersDecoder)
        assert len(caplog.records) == 1 and reason in caplog.records[0].getMessage()
    model = family_model("llama")
    model.config.quantization_config = {"quant_method": "bitsandbytes", "_load_in_4bit": True}
    assert unsupported_reason(model) is None  # a 4-bit config over plain weights: nothing to refuse


@pytest.mark.processes  # inductor compiles in worker processes of its own
@pytest.mark.slow
def test_the_4_bit_step_compiles_whole_and_equals_the_eager_step(tmp_path):
    """``torch.compile(fullgraph=True)`` traces bitsandbytes' 4-bit matmul (a custom op with a fake kernel) and
    the LoRA beside it (a graph break would raise): the same NLLs as the eager step, one graph for the bucket."""
    from torch._dynamo.utils import counters
    from transformers import Qwen3Config, Qwen3ForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # one layer: compiling costs less
        Qwen3ForCausalLM(Qwen3Config(**{**SHAPE, "num_hidden_layers": 1}, head_dim=16)).save_pretrained(tmp_path)
    model = seeded_adapter(load_four_bit(tmp_path, "nf4-double-f32"))
    torch._dynamo.reset()
    counters.clear()
    compiled, eager = Engine(model, compile=True), Engine(model)
    found = []
    for engine in (eager, compiled):
        engine.start(2, 40, SPACE)
        rows = [engine.prefill(lane, prompt, len(prompt)) for lane, prompt in enumerate(PROMPTS)]
        ends = [len(prompt) for prompt in PROMPTS]
        rows += engine.step([[1], [2]], ends)
        rows += engine.step([[3], [0]], [ends[0], ends[1] + 1])  # lane 0 rewound
        rows += engine.step([[2], [1]], [ends[0] + 1, ends[1] + 2])
        engine.release()
        found.append(rows)
    assert compiled.compiled  # no fallback to the eager step
    for fast, slow in zip(*found):
        np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-5)
    assert counters["stats"]["unique_graphs"] == 1
    torch._dynamo.reset()
