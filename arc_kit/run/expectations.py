"""What to expect before anything is measured: the planner's first speeds, from the model's size and the device.

Each part of a solve (``planner.PARTS``) calls the model in its own way: a test-time training step on one
sequence, a decode step of all of a search's lanes, a scoring forward of one prompt. A call costs a host
overhead that grows with the model's layers (Python, kernel launches: the framework's, not the GPU's)
plus the least time the GPU needs for it times a ratio: for a decode step its memory-bandwidth floor
(``decode_floor_seconds``: the weights and the lanes' cache read once), for training and
scoring their arithmetic at the GPU's peak (``Device.flops``). Every overhead and ratio comes from a
measurement named in ``MEASUREMENTS`` (the figures ``docs/results.md`` records for the H100) and is worked
out from it below, not chosen:

- transformers' own decode step (the reference engine's, before issue 45): 83.3 ms for the 30 layers of
  SmolLM2-135M's shape on the H100, of which the bandwidth floor is 0.07 ms, so 2.8 ms of overhead a layer; a
  scoring forward is priced the same;
- training: a test-time training step, 0.300 s on 110-token sequences on the H100, and the shipped model's
  fine-tune there, 0.748 s a step of 37,325 tokens in two passes of 8 sequences: each a pass's overhead
  plus ``COMPUTE_RATIO`` times the step's arithmetic floor, two equations for the two unknowns (10 ms a
  layer, 4.5); a scoring forward's arithmetic takes the same ratio;
- the engine's decode step (compiled, CUDA graphs), measured on the H100 (2026-11-26): 2.03 ms a step
  for 28 layers of width 64 (almost no arithmetic: 0.07 ms of overhead a layer), and 5.51 ms for a
  Llama-3.2-3B-shaped model at 16 lanes of 1,619-token prompts, whose bandwidth floor is about 2.6 ms: 1.35
  times the floor once the overhead is taken off. A GPU cell whose settings decode on the compiled engine
  (the default) is priced so, 4-bit models too (their step on a GPU is not measured: bitsandbytes' kernels
  may take longer than the bf16 ratio says); one with the engine kept eager as transformers' step
  above.

Not measured: how close transformers' decode gets to its bandwidth floor (the 135M model's step is
almost all overhead), so its ratio is 1, the floor itself; and the engine's scoring forward, priced as
transformers'. On the CPU the first speeds are those the dry run measured on the CPU machine (the
reference engine of the time, 2026-11-24), scaled by the model's parameters. Every finished task's
measurement replaces these.

This module knows shapes, devices (the makers' data sheets) and the planner's units; it loads no model
(``shape_of_folder`` reads a config). The benchmarks (``experiments.bench``, ``engine_bench``) measure against
its bandwidth floor too.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from arc_kit.model.bases import built_folder
from arc_kit.model.checks import architecture_of
from arc_kit.model.folders import DELTA_INDEX, is_delta_folder, read_json
from arc_kit.model.memory import Architecture, kv_cache_bytes, parameters, weight_bytes
from arc_kit.run.planner import Speeds, TaskSize, searches_per_test
from arc_kit.settings import SolveSettings


# Peak memory bandwidth (bytes per second) from the makers' data sheets, by a part of the name torch gives the
# device; the first match counts (the more specific names first).
PEAK_BANDWIDTH = (("H200", 4.8e12), ("H100 NVL", 3.9e12), ("H100 PCIe", 2.0e12), ("H100", 3.35e12),
                  ("A100 80GB PCIe", 1.935e12), ("A100-SXM4-80GB", 2.039e12), ("A100", 1.555e12),
                  ("A10G", 6.0e11), ("L4", 3.0e11), ("T4", 3.2e11), ("P100", 7.32e11))


def device_bandwidth(name: str) -> float | None:
    """The peak memory bandwidth of a GPU named ``name`` (bytes per second), or None if not in the table."""
    return next((bandwidth for part, bandwidth in PEAK_BANDWIDTH if part in name), None)


def parameter_bytes(model) -> int:
    """Bytes of a loaded model's parameters (a tied embedding and head counted once)."""
    return sum(parameter.numel() * parameter.element_size() for parameter in model.parameters())


def kv_bytes_per_token(config, element_bytes: int) -> int:
    """Bytes one token adds to a loaded model's KV cache (``kv_cache_bytes`` of its shape, from its live config)."""
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return config.num_hidden_layers * 2 * heads * head_dim * element_bytes


def decode_floor_seconds(weights: int, cache_tokens: int, bytes_per_token: int, bandwidth: float) -> float:
    """The least time a memory-bound decode step can take: ``weights`` bytes and the cache of
    ``cache_tokens`` tokens (all lanes together), each read once, at ``bandwidth`` bytes per second."""
    return (weights + cache_tokens * bytes_per_token) / bandwidth


def forward_flops(shape: Architecture, context: float) -> float:
    """Arithmetic of one token's forward pass with ``context`` tokens before it: the matrix products (head
    included, embeddings are a lookup) and attention's scores and sums."""
    return 2 * (parameters(shape).linear + shape.vocab * shape.hidden) + \
        4 * shape.layers * context * shape.heads * shape.head_dim


def sized(shape: Architecture) -> str:
    return f"{shape.name or shape.model_type} ({parameters(shape).total / 1e6:,.0f}M parameters), " \
           f"{'4-bit' if shape.four_bit else 'bf16'}"


# The table's models, shrunk to the kit's alphabet (76 tokens); the shapes are their published config.json's.
SMOLLM2_135M = Architecture("llama", 30, 576, 1536, 9, 3, 64, 76, True, name="SmolLM2-135M")
LLAMA_1B = Architecture("llama", 16, 2048, 8192, 32, 8, 64, 76, True, name="Llama-3.2-1B")
LLAMA_3B = Architecture("llama", 28, 3072, 8192, 24, 8, 128, 76, True, name="Llama-3.2-3B")
NEMO_8B = Architecture("mistral", 40, 4096, 11520, 32, 8, 128, 76, False, name="Mistral-NeMo-Minitron-8B")
TABLE_SHAPES = (SMOLLM2_135M, LLAMA_1B, LLAMA_1B.with_four_bit(), LLAMA_3B, LLAMA_3B.with_four_bit(), NEMO_8B,
                NEMO_8B.with_four_bit())
NAMED_BASES = {"smollm2-135m": SMOLLM2_135M}  # a delta's base, when it is not built on this machine


def shape_of_folder(path: str | os.PathLike) -> Architecture | None:
    """The shape of a model folder (its config, a delta's base's, or a named base's); None when none says."""
    path = Path(path)
    config, name = read_json(path / "config.json"), path.name
    if not config and is_delta_folder(path):
        name = str(read_json(path / DELTA_INDEX).get("base"))  # a FIFO or a damaged index: one line
        config = read_json(built_folder(name) / "config.json")
        if not config and name in NAMED_BASES:
            return NAMED_BASES[name]
    return replace(architecture_of(config, path), name=name) if config.get("num_hidden_layers") else None


@dataclass(frozen=True)
class Device:
    """A GPU as its data sheet gives it: memory, dense 16-bit tensor arithmetic, memory bandwidth."""

    name: str  # a part of the name torch gives it
    memory: float  # bytes
    flops: float  # FLOP/s: bf16, or fp16 where it has no bf16 (T4), dense (no sparsity)
    bandwidth: float  # bytes per second


def _gpu(name: str, memory_gb: float, tflops: float, bandwidth: float | None = None) -> Device:
    return Device(name, memory_gb * 1e9, tflops * 1e12, bandwidth or device_bandwidth(name))


# The makers' data sheets; the more specific names first. Bandwidth: PEAK_BANDWIDTH.
GPUS = (_gpu("H200", 141, 989), _gpu("H100 PCIe", 80, 756), _gpu("H100", 80, 989), _gpu("A100", 80, 312),
        _gpu("L4", 24, 121), _gpu("T4", 16, 65), _gpu("RTX 4090", 24, 165, 1.008e12))


def gpu_named(name: str) -> Device | None:
    """The device whose name is part of ``name`` (as torch or nvidia-smi gives it), or None."""
    return next((device for device in GPUS if device.name.lower() in name.lower()), None)


def visible_gpu_name() -> str | None:
    """The first GPU's name by nvidia-smi (which, unlike torch, opens no CUDA context here); None without one."""
    try:
        listed = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    names = listed.stdout.strip().splitlines() if listed.returncode == 0 else []
    return names[0].strip() if names else None


@dataclass(frozen=True)
class Measurement:
    """A figure measured on a real run, and where it is recorded."""

    value: float
    what: str
    source: str  # the section of docs/results.md, the machine, the date


H100 = gpu_named("H100")
CPU_SPEEDS = Speeds(0.00802, 0.153, 0.0118)  # the dry run's, for MEASUREMENTS["cpu_speeds"].value parameters
MEASUREMENTS = {
    "decode_step": Measurement(1 / 12.0, "seconds a decode step (1 lane, 1,024-token prompt) of a model of "
                               "SmolLM2-135M's shape in bf16, transformers 5.17 (transformers' own forward)",
                               "docs/results.md 'Decoding on the H100' (scripts/decode_bench.py), the H100, "
                               "2026-11-22"),
    "ttt_step": Measurement(19.2 / 64, "seconds a test-time training step on 110-token sequences, the shipped "
                            "model (64 steps on task 00576224, 19.2 s)",
                            "docs/results.md 'The ablation on the H100', 2026-11-22"),
    "finetune_step": Measurement(341 / 456, "seconds a fine-tuning step of 37,325 tokens (17,020,212 tokens in 456 "
                                 "steps of 2 x 8 sequences, 2,333 tokens a sequence), the shipped model",
                                 "docs/results.md 'The shipped default model', the H100, 2026-11-22"),
    "fast_step": Measurement(5.506e-3, "seconds a step of the engine (compiled, CUDA graphs), 16 lanes of "
                             "1,619-token prompts, a Llama-3.2-3B-shaped model with random weights in bf16",
                             "docs/results.md 'Issue 39 (partial)', the H100, 2026-11-26"),
    "fast_overhead_step": Measurement(2.03e-3, "seconds a step of the engine (compiled, CUDA graphs), 16 lanes "
                                      "of 64-token prompts, 28 layers of width 64 (the overhead: almost no arithmetic)",
                                      "docs/results.md 'Issue 39 (partial)', the H100, 2026-11-26"),
    "cpu_speeds": Measurement(parameters(SMOLLM2_135M).total, "parameters of the shipped model, whose dry run measured "
                              f"{CPU_SPEEDS.training:g} s a training token-step, {CPU_SPEEDS.generation:g} s a "
                              f"generation unit, {CPU_SPEEDS.scoring:g} s a scored prompt token (2 threads)",
                              "docs/results.md 'The planner's estimates', the CPU machine (2 cores), 2026-11-24"),
}


def _training_floor(shape: Architecture, device: Device, tokens: float) -> float:
    """Seconds of one training step's arithmetic (forward and backward: three forwards) on ``tokens`` tokens."""
    return 3 * forward_flops(shape, tokens / 2) * tokens / device.flops


BANDWIDTH_RATIO = 1.0  # not measured: no GPU decode of a model large enough for its floor to show
DECODE_OVERHEAD = (MEASUREMENTS["decode_step"].value - BANDWIDTH_RATIO * decode_floor_seconds(
    weight_bytes(SMOLLM2_135M), 1024, kv_cache_bytes(SMOLLM2_135M, 1, 1), H100.bandwidth)) / SMOLLM2_135M.layers
# The engine's two measurements, each 28 layers' overhead plus the ratio times the step's floor (the width-64
# model's floor is tiny): two equations, two unknowns.
_WIDTH_64 = Architecture("llama", 28, 64, 128, 4, 2, 16, 64, False, name="width 64")
_OVERHEAD_FLOOR = decode_floor_seconds(weight_bytes(_WIDTH_64), 16 * 64, kv_cache_bytes(_WIDTH_64, 1, 1),
                                       H100.bandwidth)
_FAST_FLOOR = decode_floor_seconds(weight_bytes(LLAMA_3B), 16 * 1619, kv_cache_bytes(LLAMA_3B, 1, 1), H100.bandwidth)
FAST_BANDWIDTH_RATIO = (MEASUREMENTS["fast_step"].value - MEASUREMENTS["fast_overhead_step"].value) / \
    (_FAST_FLOOR - _OVERHEAD_FLOOR)
FAST_DECODE_OVERHEAD = (MEASUREMENTS["fast_overhead_step"].value - FAST_BANDWIDTH_RATIO * _OVERHEAD_FLOOR) / \
    _WIDTH_64.layers
# The two training measurements, each a step's overhead plus the ratio times its arithmetic floor (the fine-tune's
# step being two passes): two equations, two unknowns.
_TTT_FLOOR = _training_floor(SMOLLM2_135M, H100, 110)
_FINETUNE_FLOOR = 2 * 8 * _training_floor(SMOLLM2_135M, H100, 2_333)
COMPUTE_RATIO = (MEASUREMENTS["finetune_step"].value - 2 * MEASUREMENTS["ttt_step"].value) / \
    (_FINETUNE_FLOOR - 2 * _TTT_FLOOR)
TRAINING_OVERHEAD = (MEASUREMENTS["ttt_step"].value - COMPUTE_RATIO * _TTT_FLOOR) / SMOLLM2_135M.layers


CUDA_CONTEXT_BYTES = 2**29  # what each process's CUDA context takes on a GPU besides its tensors (about 0.5 GiB)
MAX_WORKERS_PER_GPU = 8  # 8 processes on one H100 decoded 7.7 times as fast as one; more gain little


def workers_per_gpu_for(peak_bytes: float, total_bytes: float, gpus: int, cpus: int | None = None) -> int:
    """How many workers share one GPU: as many as 90% of its memory holds at the peak (each with its CUDA
    context), at most ``MAX_WORKERS_PER_GPU`` and at most the CPU cores per GPU, at least one."""
    cpus = cpus or os.cpu_count() or 1
    by_memory = int(0.9 * total_bytes // (peak_bytes + CUDA_CONTEXT_BYTES))
    return max(1, min(MAX_WORKERS_PER_GPU, by_memory, cpus // max(1, gpus)))


@dataclass(frozen=True)
class PartCost:
    """Seconds a unit of one part (``planner.work_units``) costs: the host's overhead, and the device's floor
    (bandwidth or arithmetic) times its measured ratio."""

    overhead: float
    floor: float
    ratio: float

    @property
    def seconds(self) -> float:
        return self.overhead + self.ratio * self.floor

    def with_workers(self, workers: int) -> float:
        """Seconds a unit with ``workers`` processes sharing one device: their overheads overlap, the device's
        own time does not (8 processes decoded 7.7 times as fast as one on the H100, where overhead is all)."""
        return max(self.seconds / workers, self.ratio * self.floor)


@dataclass(frozen=True)
class Typical:
    """The token counts a unit's cost depends on: a test input's prompt and answer, a training sequence, the
    lanes a decode step runs together."""

    prompt: float
    answer: float
    training: float
    lanes: float

    @classmethod
    def of(cls, sizes: Sequence[TaskSize], settings: SolveSettings, lanes: float | None = None) -> Typical:
        """The typical work of ``sizes`` at ``settings``; ``lanes``: searched together (default: as a solve does)."""
        tests = sum(size.tests for size in sizes) or 1
        trained = [min(size.training_tokens, settings.max_len or size.training_tokens) for size in sizes
                   if size.training_tokens]
        lanes = settings.inference_augmentations / searches_per_test(settings) if lanes is None else lanes
        return cls(sum(size.prompt_tokens for size in sizes) / tests or 1.0,
                   sum(size.answer_tokens for size in sizes) / tests, sum(trained) / len(trained) if trained else 1.0,
                   max(1.0, lanes))


def decodes_on_fast_engine(settings: SolveSettings) -> bool:
    """Whether ``settings`` decode on a GPU as the engine's measured step does: compiled (for a 4-bit model an
    assumption: only its bf16 step was measured); kept eager, it is priced as transformers' step."""
    return settings.engine_compile != "off"


def part_costs(shape: Architecture, device: Device, typical: Typical, fast: bool = False) -> dict[str, PartCost]:
    """Per part, what a unit costs ``shape`` on ``device`` (the module docstring's model); ``fast``: generation
    decodes on the compiled engine (``decodes_on_fast_engine``), else as transformers' step."""
    context = typical.prompt + typical.answer / 2
    decode_floor = decode_floor_seconds(weight_bytes(shape), typical.lanes * context, kv_cache_bytes(shape, 1, 1),
                                        device.bandwidth)
    scoring_floor = forward_flops(shape, typical.prompt / 2) * typical.prompt / device.flops
    return {"training": PartCost(shape.layers * TRAINING_OVERHEAD / typical.training,
                                 _training_floor(shape, device, typical.training) / typical.training, COMPUTE_RATIO),
            "generation": PartCost(shape.layers * (FAST_DECODE_OVERHEAD if fast else DECODE_OVERHEAD) / typical.lanes,
                                   decode_floor / typical.lanes, FAST_BANDWIDTH_RATIO if fast else BANDWIDTH_RATIO),
            "scoring": PartCost(shape.layers * DECODE_OVERHEAD / typical.prompt, scoring_floor / typical.prompt,
                                COMPUTE_RATIO)}


def guessed_speeds(shape: Architecture | None, device: Device | None, settings: SolveSettings,
                   sizes: Sequence[TaskSize]) -> Speeds:
    """The planner's first speeds for ``shape`` on ``device`` (None: the CPU), said in ``Speeds.guess``; the
    kit's fixed assumption when the shape is unknown."""
    if shape is None:
        return Speeds(guess="the kit's fixed assumption (the model's shape is unknown)")
    if device is None:
        scale = parameters(shape).total / MEASUREMENTS["cpu_speeds"].value
        return Speeds(CPU_SPEEDS.training * scale, CPU_SPEEDS.generation * scale, CPU_SPEEDS.scoring * scale,
                      guess=f"{sized(shape)} on a CPU: the CPU machine's dry-run speeds (2 cores, 2026-11-24) scaled "
                            "by the parameters")
    fast = decodes_on_fast_engine(settings)
    costs = part_costs(shape, device, Typical.of(sizes, settings), fast)
    engine = "decoding on the compiled engine" if fast else "transformers' decode"
    return Speeds(costs["training"].seconds, costs["generation"].seconds, costs["scoring"].seconds,
                  guess=f"{sized(shape)} on {device.name}: overhead + floor x ratio, measured on the H100 ({engine}; "
                        "scoring priced as transformers', not measured)")


def first_speeds(model: str | os.PathLike, settings: SolveSettings, sizes: Sequence[TaskSize],
                 device_name: str | None) -> Speeds:
    """``guessed_speeds`` for a model folder on the named GPU (None: the CPU; a GPU not on record: fixed)."""
    device = gpu_named(device_name) if device_name else None
    if device_name and device is None:
        return Speeds(guess=f"the kit's fixed assumption ({device_name} is not on record)")
    try:
        shape = shape_of_folder(model)
    except (OSError, ValueError, KeyError, TypeError) as error:  # a first guess never stops a run
        return Speeds(guess=f"the kit's fixed assumption (the model's config: {type(error).__name__})")
    return guessed_speeds(shape, device, settings, sizes)


def speeds_for_model(model, settings: SolveSettings, sizes: Sequence[TaskSize]) -> Speeds:
    """``guessed_speeds`` for a loaded model (transformers or peft), on the device its weights are on."""
    config, parameter = getattr(model, "config", None), next(iter(model.parameters()), None)
    if config is None or parameter is None or not getattr(config, "num_hidden_layers", None):
        return Speeds(guess="the kit's fixed assumption (the model has no transformers config)")
    device = None
    if parameter.device.type == "cuda":
        import torch

        name = torch.cuda.get_device_name(parameter.device)
        device = gpu_named(name)
        if device is None:
            return Speeds(guess=f"the kit's fixed assumption ({name} is not on record)")
    shape = architecture_of(config.to_dict(), "the model's config")
    return guessed_speeds(shape.with_four_bit() if getattr(model, "is_loaded_in_4bit", False) else shape, device,
                          settings, sizes)
