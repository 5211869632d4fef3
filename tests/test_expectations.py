"""What to expect before anything is measured: shapes, floors, the measured ratios, the planner's first speeds,
the estimate's sources and the model size x GPU table."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

from arc_kit.model.checks import architecture_of
from arc_kit.model.memory import FOUR_BIT_MATRIX_BYTES, Architecture, kv_cache_bytes, parameters, weight_bytes
from arc_kit.run import expectations
from arc_kit.run.expectations import (
    COMPUTE_RATIO,
    MEASUREMENTS,
    NEMO_8B,
    SMOLLM2_135M,
    TABLE_SHAPES,
    Typical,
    decode_floor_seconds,
    gpu_named,
    guessed_speeds,
    kv_bytes_per_token,
    part_costs,
    shape_of_folder,
    speeds_for_model,
)
from arc_kit.run.estimates import TABLE_MACHINES, Machine, expected_cell, expectations_table
from arc_kit.run.planner import Speeds, TaskSize
from arc_kit.settings import SolveSettings, solve_preset

PAPER = solve_preset("paper")
SIZES = [TaskSize(f"t{i}", training_tokens=1500 + 100 * i, prompt_tokens=2000 + 300 * i, answer_tokens=300,
                  train_pairs=3) for i in range(6)]
H100 = gpu_named("NVIDIA H100 80GB HBM3")


def transformers_config(shape: Architecture):
    """The config of ``shape`` as transformers writes it (Mistral for an untied head, as NeMo-Minitron is)."""
    kind = LlamaConfig if shape.tied else MistralConfig
    return kind(vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
                num_hidden_layers=shape.layers, num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
                head_dim=shape.head_dim, tie_word_embeddings=shape.tied)


@pytest.mark.parametrize("shape", [SMOLLM2_135M, NEMO_8B, expectations.LLAMA_3B], ids=lambda shape: shape.name)
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


def test_the_overheads_and_ratio_reproduce_the_measurements_they_come_from():
    """Each derived figure, put back into the cost model, gives back the H100 measurement it was taken from."""
    one_lane = Typical(prompt=1024, answer=0, training=110, lanes=1)
    costs = part_costs(SMOLLM2_135M, H100, one_lane)
    assert costs["generation"].seconds == pytest.approx(MEASUREMENTS["decode_step"].value)  # 1 / 12 tokens a second
    assert costs["generation"].floor == pytest.approx(decode_floor_seconds(
        weight_bytes(SMOLLM2_135M), 1024, kv_cache_bytes(SMOLLM2_135M, 1, 1), 3.35e12))
    assert costs["training"].seconds * 110 == pytest.approx(MEASUREMENTS["ttt_step"].value)  # 19.2 s / 64 steps
    finetune = part_costs(SMOLLM2_135M, H100, Typical(prompt=1024, answer=0, training=2_333, lanes=1))["training"]
    step = 2 * finetune.overhead * 2_333 + 16 * finetune.ratio * finetune.floor * 2_333  # 2 passes of 8 sequences
    assert step == pytest.approx(MEASUREMENTS["finetune_step"].value) and 1 < COMPUTE_RATIO < 30


def test_first_speeds_grow_with_the_model_and_shrink_with_the_gpu():
    def speeds(shape, name):
        return guessed_speeds(shape, gpu_named(name), PAPER, SIZES)

    shapes = (SMOLLM2_135M, expectations.LLAMA_1B, expectations.LLAMA_3B, NEMO_8B)
    typical = Typical.of(SIZES, PAPER)
    for part in ("training", "generation", "scoring"):
        floors = [part_costs(shape, gpu_named("L4"), typical)[part].floor for shape in shapes]
        assert floors == sorted(floors) and floors[0] < floors[-1], part  # the device's time grows with the size
        # the host's overhead grows with the layers: 30 for the 135M model, 16, 28 and 40 for the others
        ladder = [getattr(speeds(shape, "L4"), part) for shape in shapes[1:]]
        assert ladder == sorted(ladder) and getattr(speeds(SMOLLM2_135M, "L4"), part) < ladder[-1], part
        assert getattr(speeds(NEMO_8B, "H100"), part) < getattr(speeds(NEMO_8B, "T4"), part), part
    # decoding reads the weights: 4 bits decode faster than 16 on the same GPU
    assert speeds(NEMO_8B.with_four_bit(), "L4").generation < speeds(NEMO_8B, "L4").generation
    guessed = speeds(NEMO_8B, "L4")
    assert guessed.measured_parts == {} and "on L4" in guessed.guess and "not measured" in guessed.guess
    assert Speeds.from_json(guessed.to_json()) == guessed  # the guess travels in speeds.json


def test_on_the_cpu_the_dry_runs_speeds_scale_with_the_parameters():
    small = guessed_speeds(SMOLLM2_135M, None, PAPER, SIZES)
    assert (small.training, small.generation, small.scoring) == pytest.approx((0.00802, 0.153, 0.0118))
    large = guessed_speeds(NEMO_8B, None, PAPER, SIZES)
    ratio = parameters(NEMO_8B).total / parameters(SMOLLM2_135M).total
    assert large.generation / small.generation == pytest.approx(ratio)
    assert guessed_speeds(None, H100, PAPER, SIZES).guess.startswith("the kit's fixed assumption")


def test_a_loaded_model_and_a_model_folder_are_priced_by_their_own_shape(model_folder):
    from arc_kit.model.loading import load_model

    loaded = load_model(model_folder, device="cpu").model
    shape = shape_of_folder(model_folder)
    assert shape == replace(architecture_of(loaded.config.to_dict()), name=shape.name)
    speeds, from_folder = speeds_for_model(loaded, PAPER, SIZES), guessed_speeds(shape, None, PAPER, SIZES)
    assert (speeds.training, speeds.generation, speeds.scoring) == \
        (from_folder.training, from_folder.generation, from_folder.scoring)
    assert "on a CPU" in speeds.guess and speeds.generation == pytest.approx(
        0.153 * parameters(shape).total / parameters(SMOLLM2_135M).total)


def test_a_cell_halves_its_lanes_to_fit_and_says_when_nothing_fits():
    l4, t4 = (Machine(gpu_named(name), 1, name) for name in ("L4", "T4"))
    assert expected_cell(SIZES, PAPER, NEMO_8B, t4).unfit.startswith("14.7 GB of weights")
    fitted = expected_cell(SIZES, PAPER, NEMO_8B, l4)
    assert not fitted.unfit and fitted.lanes < PAPER.inference_augmentations and fitted.workers == 1
    small = expected_cell(SIZES, PAPER, SMOLLM2_135M, l4)
    assert small.lanes == PAPER.inference_augmentations and small.workers == 8  # the most a GPU is given
    assert 0 < small.least < small.seconds["total"]
    four = expected_cell(SIZES, PAPER, SMOLLM2_135M, Machine(l4.device, 4, "4x L4"))
    assert four.seconds["total"] == pytest.approx(small.seconds["total"] / 4)


def test_the_table_has_a_derived_cell_for_every_model_and_machine_and_names_its_ratios():
    lines = expectations_table(SIZES, PAPER, "six tasks")
    rows = [line for line in lines if line.startswith("| ") and "parameters" not in line]
    assert len(rows) == len(TABLE_SHAPES)
    for row in rows:
        cells = row.split(" | ")[2:]
        assert len(cells) == len(TABLE_MACHINES)
        assert all(" h d (" in cell or cell.startswith("does not fit") for cell in cells), row
    text = "\n".join(lines)
    assert "no cell measured" in text and "2026-11-22" in text and "not measured" in text
    assert "Mistral-NeMo-Minitron-8B, 4-bit" in text and "4x L4 (Kaggle)" in text


def test_estimate_says_what_is_guessed_and_warns_when_a_run_recorded_no_speeds(tmp_path, model_folder, kaggle_files,
                                                                               capsys):
    from arc_kit.cli import main
    from arc_kit.run.runs import open_run

    open_run(tmp_path / "run", SolveSettings(max_len=2048), {"dataset": str(kaggle_files.challenges)})
    assert main(["estimate", "--records", str(tmp_path / "run"), "--dataset", str(kaggle_files.challenges),
                 "--model", str(model_folder), "--gpu", "H100"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[:2] == [f"run {tmp_path / 'run'}: the tasks: {kaggle_files.challenges} (its run.json)",
                           f"run {tmp_path / 'run'}: the model: {model_folder}"]
    assert printed[2] == f"warning: {tmp_path / 'run'} recorded no speeds (no task finished with the model): every " \
                         "speed below is guessed"
    assert printed[4].startswith("  guessed: training, generation, scoring, for ") and "on H100" in printed[4]
    assert main(["estimate", "--dataset", str(kaggle_files.challenges), "--model", str(model_folder)]) == 0
    printed = capsys.readouterr().out
    assert "warning" not in printed and "on a CPU" in printed and "with the paper settings" in printed


def test_the_first_task_measures_the_speeds_and_its_peak_memory_the_actors_per_gpu():
    from arc_kit.run.planner import Planner, work_units
    from arc_kit.run.pool import first_task_line

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
    assert per_gpu == slots_per_gpu(4 * gib, 24 * gib) and line.endswith(f"{per_gpu} worker(s) per GPU")
    per_gpu, line = first_task_line(Planner(SIZES, PAPER, deadline=float("inf"), speeds=guessed), "t1", None, {}, 1)
    assert per_gpu is None and line == f"task t1 measured nothing: the planner keeps its guessed speeds ({guessed.guess})"


def slots_per_gpu(peak: float, total: float) -> int:
    from arc_kit.run.expectations import workers_per_gpu_for

    return workers_per_gpu_for(peak, total, 1)


def test_the_fast_engines_overhead_and_ratio_reproduce_its_h100_measurements_and_price_the_default_settings():
    """The compiled engine's two H100 steps, put back into the cost model, come out as measured; the default
    settings decode on it, the reference engine's and an eager engine's are priced as the reference's."""
    width_64 = Architecture("llama", 28, 64, 128, 4, 2, 16, 64, False, name="width 64")
    overhead = part_costs(width_64, H100, Typical(prompt=64, answer=0, training=1, lanes=16), fast=True)
    assert overhead["generation"].seconds * 16 == pytest.approx(MEASUREMENTS["fast_overhead_step"].value)
    step = part_costs(expectations.LLAMA_3B, H100, Typical(prompt=1619, answer=0, training=1, lanes=16), fast=True)
    assert step["generation"].seconds * 16 == pytest.approx(MEASUREMENTS["fast_step"].value)
    assert 1 <= expectations.FAST_BANDWIDTH_RATIO < 3 and expectations.FAST_DECODE_OVERHEAD < expectations.DECODE_OVERHEAD / 10
    assert expectations.decodes_on_fast_engine(PAPER)
    assert not expectations.decodes_on_fast_engine(PAPER.replace(engine_compile="off"))
    fast = guessed_speeds(expectations.LLAMA_3B, H100, PAPER, SIZES)
    reference = guessed_speeds(expectations.LLAMA_3B, H100, PAPER.replace(engine_compile="off"), SIZES)
    assert fast.generation < reference.generation / 5 and "compiled engine" in fast.guess
    assert (fast.training, fast.scoring) == (reference.training, reference.scoring)
