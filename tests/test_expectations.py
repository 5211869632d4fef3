"""The planner's prior: shapes, the bandwidth floor times the stated factor, the factor against the run it comes
from, readable sizes, the first speeds of a model folder and a loaded model, and the model size x GPU table."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

from arc_kit.model.checks import architecture_of
from arc_kit.model.memory import FOUR_BIT_MATRIX_BYTES, Architecture, kv_cache_bytes, parameters, weight_bytes
from arc_kit.run import expectations
from arc_kit.run.expectations import (
    CPU,
    LLAMA_3B,
    NEMO_8B,
    SMOLLM2_135M,
    STEP_FACTOR,
    TABLE_MACHINES,
    TABLE_SHAPES,
    count_words,
    decode_floor_seconds,
    expectations_table,
    expected_seconds,
    gpu_named,
    guessed_speeds,
    kv_bytes_per_token,
    shape_of_folder,
    speeds_for_model,
)
from arc_kit.run.planner import PROMPT_TOKEN_WEIGHT, Speeds, TaskSize
from arc_kit.settings import solve_preset

PAPER = solve_preset("paper")
SIZES = [TaskSize(f"t{i}", training_tokens=1500 + 100 * i, prompt_tokens=2000 + 300 * i, answer_tokens=300,
                  train_pairs=3) for i in range(6)]


def transformers_config(shape: Architecture):
    """The config of ``shape`` as transformers writes it (Mistral for an untied head, as NeMo-Minitron is)."""
    kind = LlamaConfig if shape.tied else MistralConfig
    return kind(vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
                num_hidden_layers=shape.layers, num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
                head_dim=shape.head_dim, tie_word_embeddings=shape.tied)


@pytest.mark.parametrize("shape", [SMOLLM2_135M, NEMO_8B, LLAMA_3B], ids=lambda shape: shape.name)
def test_a_shapes_parameters_and_cache_are_what_transformers_builds(shape):
    config = transformers_config(shape)
    with torch.device("meta"):  # no memory: the 8B model's parameters are counted, never allocated
        model = (LlamaForCausalLM if shape.tied else MistralForCausalLM)(config)
    assert parameters(shape).total == sum(parameter.numel() for parameter in model.parameters())
    assert kv_cache_bytes(shape, 1, 1) == kv_bytes_per_token(config, 2)
    read = architecture_of(config.to_dict())  # the positions and the stored dtype are no table shape's
    assert replace(read, name=shape.name, max_positions=None) == shape
    assert weight_bytes(shape) == 2 * parameters(shape).total
    assert architecture_of({**config.to_dict(), "quantization_config": {"quant_method": "bitsandbytes",
                                                                        "load_in_4bit": True}}).four_bit
    # the linear weights in nf4, doubly quantized (an 8-bit absmax a block of 64, a float32 one a block of 256 of
    # those: about 4.13 bits, check-model's estimate) with each matrix's two code tables, the rest at 16
    linear, matrices = parameters(shape).linear, 7 * shape.layers
    nf4 = 0.5 + 1 / 64 + 4 / (64 * 256)
    assert weight_bytes(shape.with_four_bit()) == pytest.approx(
        linear * nf4 + matrices * FOUR_BIT_MATRIX_BYTES + (parameters(shape).total - linear) * 2)


def test_the_prior_is_the_bandwidth_floor_times_the_stated_factor():
    """By hand: a step reads the weights and the lanes' cache once; a unit is a step over its lanes; a token
    processed in parallel is the planner's prompt-token share of a one-lane step."""
    l4 = gpu_named("NVIDIA L4")
    assert (l4.bandwidth, l4.memory, l4.source) == (300e9, 24e9, "the maker's data sheet")
    tests = len(SIZES)
    prompt, answer = sum(size.prompt_tokens for size in SIZES) / tests, 300
    context, lanes = prompt + answer / 2, PAPER.inference_augmentations / 2  # the first view alone, then the rest

    def step(lanes):
        return STEP_FACTOR * (weight_bytes(LLAMA_3B) + lanes * context * kv_cache_bytes(LLAMA_3B, 1, 1)) / 300e9

    speeds = guessed_speeds(LLAMA_3B, l4, PAPER, SIZES)
    assert speeds.generation == pytest.approx(step(lanes) / lanes)
    assert speeds.training == speeds.scoring == pytest.approx(PROMPT_TOKEN_WEIGHT * step(1))
    assert speeds.measured_parts == {} and "3.4 x the bandwidth floor" in speeds.guess and "L4 at 300 GB/s" in \
        speeds.guess and "Llama-3.2-3B (2.8B parameters, 16-bit)" in speeds.guess
    assert Speeds.from_json(speeds.to_json()) == speeds  # the guess travels in speeds.json
    # on the CPU the weights and the cache are float32
    cpu = guessed_speeds(LLAMA_3B, CPU, PAPER, SIZES)
    assert cpu.training == pytest.approx(PROMPT_TOKEN_WEIGHT * STEP_FACTOR * decode_floor_seconds(
        weight_bytes(LLAMA_3B, 4), context, kv_cache_bytes(LLAMA_3B, 1, 1, 4), CPU.bandwidth))
    assert "32-bit) on CPU" in cpu.guess
    assert guessed_speeds(None, l4, PAPER, SIZES).guess.startswith("the kit's fixed assumption")


def test_first_speeds_grow_with_the_model_and_shrink_with_the_bandwidth():
    def speeds(shape, name):
        return guessed_speeds(shape, gpu_named(name), PAPER, SIZES)

    shapes = (SMOLLM2_135M, expectations.LLAMA_1B, LLAMA_3B, NEMO_8B)
    for part in ("training", "generation", "scoring"):
        ladder = [getattr(speeds(shape, "L4"), part) for shape in shapes]
        assert ladder == sorted(ladder), part
        assert getattr(speeds(NEMO_8B, "H100"), part) < getattr(speeds(NEMO_8B, "T4"), part), part
    # decoding reads the weights: 4 bits decode faster than 16 on the same GPU
    assert speeds(NEMO_8B.with_four_bit(), "L4").generation < speeds(NEMO_8B, "L4").generation


@pytest.mark.slow
def test_the_factor_gives_back_the_paper_run_it_comes_from(model_folder):
    """The prior, put on the paper's timed run (400 tasks, its 8B in 4 bits on one RTX 4090, one augmentation
    searched at a time), gives its generation time within 5%; the table's check line says the rest."""
    from arc_kit import load_dataset
    from arc_kit.model.description import read_model_folder
    from arc_kit.run.expectations import PAPER_RUN, paper_check
    from arc_kit.run.planner import measure

    encoder = read_model_folder(model_folder).encoder(max_len=PAPER.max_len)  # every shrunk model: a symbol a token
    sizes = [measure(task, encoder, PAPER.max_len) for task in load_dataset("arc-agi-1/evaluation").tasks()]
    seconds, _ = expected_seconds(sizes, PAPER, NEMO_8B.with_four_bit(), gpu_named("RTX 4090"), 1, lanes=1)
    assert seconds["generation"] == pytest.approx(PAPER_RUN["generation"], rel=0.05)
    assert paper_check(sizes, PAPER).startswith("check against the paper's run (NeMo-Minitron-8B, 4-bit, one "
                                                "RTX 4090, 400 tasks")


def test_sizes_read_in_units_a_reader_knows():
    assert [count_words(count) for count in (0.2e6, 2.4e6, 135e6, 8.0e9)] == ["0.2M", "2.4M", "135M", "8.0B"]


def test_a_loaded_model_and_a_model_folder_are_priced_by_their_own_shape(model_folder):
    from arc_kit.model.loading import load_model

    loaded = load_model(model_folder, device="cpu").model
    shape = shape_of_folder(model_folder)
    assert shape == replace(architecture_of(loaded.config.to_dict()), name=shape.name)
    speeds, from_folder = speeds_for_model(loaded, PAPER, SIZES), guessed_speeds(shape, CPU, PAPER, SIZES)
    assert (speeds.training, speeds.generation, speeds.scoring) == \
        (from_folder.training, from_folder.generation, from_folder.scoring)
    assert "on CPU" in speeds.guess and "(0.1M parameters, 32-bit)" in speeds.guess
    first = expectations.first_speeds(model_folder, PAPER, SIZES, "NVIDIA L4")
    assert first.generation == guessed_speeds(shape, gpu_named("L4"), PAPER, SIZES).generation
    assert expectations.first_speeds(model_folder, PAPER, SIZES, "a card nobody has").guess == \
        "the kit's fixed assumption (a card nobody has is not on record)"


def test_a_cell_halves_its_lanes_to_fit_and_says_when_nothing_fits():
    l4, t4 = gpu_named("L4"), gpu_named("T4")
    assert expected_seconds(SIZES, PAPER, NEMO_8B, t4, 1).startswith("does not fit (14.7 GB of weights")
    _, lanes = expected_seconds(SIZES, PAPER, NEMO_8B, l4, 1)
    assert lanes < PAPER.inference_augmentations
    small, lanes = expected_seconds(SIZES, PAPER, SMOLLM2_135M, l4, 1)
    assert lanes == PAPER.inference_augmentations
    four, _ = expected_seconds(SIZES, PAPER, SMOLLM2_135M, l4, 4)
    assert four["total"] == pytest.approx(small["total"] / 4)  # four GPUs share the work


def test_the_table_has_a_cell_for_every_model_and_machine_and_names_its_prior():
    lines = expectations_table(SIZES, PAPER, "six tasks")
    rows = [line for line in lines if line.startswith("| ") and "parameters" not in line]
    assert len(rows) == len(TABLE_SHAPES)
    for row in rows:
        cells = row.split(" | ")[2:]
        assert len(cells) == len(TABLE_MACHINES)
        assert all(cell.rstrip(" |").endswith((" h", "lanes)")) or cell.startswith("does not fit") for cell in cells)
    text = "\n".join(lines)
    assert "no cell measured" in text and "3.4 x the bandwidth floor" in text and "L4 300 GB/s" in text
    assert "| Mistral-NeMo-Minitron-8B, 4-bit | 7.3B |" in text and "4x L4 (Kaggle)" in text


def test_the_first_task_measures_the_speeds_and_its_peak_memory_the_actors_per_gpu():
    from arc_kit.run.planner import Planner, work_units
    from arc_kit.run.expectations import first_task_line

    guessed = guessed_speeds(NEMO_8B, gpu_named("L4"), PAPER, SIZES)
    planner = Planner(SIZES, PAPER, deadline=float("inf"), speeds=guessed)
    units = work_units(SIZES[0], PAPER)
    timings = {"ttt": 4.0 * units["training"], "generation": 2.0 * units["generation"],
               "scoring": 3.0 * units["scoring"], "total": 9.5}
    planner.done("t0", 0, timings)  # what the pool does with every finished task
    per_gpu, line = first_task_line(planner, "t0", timings, {}, 1)
    assert (planner.speeds.training, planner.speeds.generation, planner.speeds.scoring) == pytest.approx((4, 2, 3))
    assert line.startswith("measured on task t0 in 9.5 s: 4.00e+00 s per training token") and per_gpu is None
    gib = 2**30  # with the peak memory, how many share a GPU
    per_gpu, line = first_task_line(planner, "t0", timings, {"peak_bytes": 4 * gib, "total_bytes": 24 * gib}, 1)
    assert per_gpu == expectations.workers_per_gpu_for(4 * gib, 24 * gib, 1)
    assert line.endswith(f"{per_gpu} worker(s) per GPU")
    per_gpu, line = first_task_line(Planner(SIZES, PAPER, deadline=float("inf"), speeds=guessed), "t1", None, {}, 1)
    assert per_gpu is None and line == f"task t1 measured nothing: the planner keeps its guessed speeds ({guessed.guess})"
