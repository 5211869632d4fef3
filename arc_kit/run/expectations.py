"""The planner's prior: what a model's work costs on a device before anything is measured, in one formula.

**The prior.** A decode step of ``lanes`` lanes costs ``STEP_FACTOR`` times its memory-bandwidth floor: the
weights and the lanes' KV cache, each read once, over the device's bandwidth (``decode_floor_seconds``). A
generation unit (``planner.work_units``: an explored answer token of one lane, a prompt token counting
``PROMPT_TOKEN_WEIGHT``) costs a step over its lanes; a token processed in parallel (a training step's, a
scoring pass's) costs ``PROMPT_TOKEN_WEIGHT`` of a one-lane step, as the planner counts a prompt token. The
factor and each device's bandwidth are stated with their source (``STEP_FACTOR``, ``DEVICES``): the factor is
the one whole run of a large model whose time is published, the paper's, in the planner's units.

What it leaves out: a host's per-step overhead (a small model's GPU step is mostly that) and arithmetic (a
long training sequence on a small GPU). Workers sharing a GPU share its bandwidth, so the prior prices a GPU,
not a worker. It is a first guess: every finished task's measurement replaces it, part by part.

``expectations_for`` is ``arc-kit estimate --table``: the prior per model size and GPU, each cell one model on one
machine, the lanes halved where a worker's memory is short, and the paper's timed run priced the same way
(``paper_check``). This module knows shapes, devices and the planner's units; it loads no weights
(``shape_of_folder`` reads a config, the table a tokenizer). The benchmarks (``experiments.bench``,
``engine_bench``) measure against the same bandwidth floor.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, replace

from arc_kit.data.datasets import load_tasks
from arc_kit.data.tasks import TaskSet
from arc_kit.model.checks import architecture_of
from arc_kit.method.solver import searches_per_input
from arc_kit.model.description import read_model_folder
from arc_kit.model.memory import Architecture, kv_cache_bytes, parameters, weight_bytes
from arc_kit.run.planner import (
    PARTS,
    PROMPT_TOKEN_WEIGHT,
    Planner,
    Speeds,
    TaskSize,
    hours,
    measure,
    work_units,
)
from arc_kit.settings import SolveSettings

# The paper's timed run (its Table 3 and appendix; the authors' code, not the kit's): NeMo-Minitron-8B in 4 bits on
# one RTX 4090, the 400 ARC-AGI-1 evaluation tasks, one augmentation searched at a time, generation in 9:32 h, 3.4
# times the floor this formula gives that run's generation units (docs/results.md, "The estimate's prior";
# ``estimates.paper_check`` prices that run again, and a test holds its generation within 5%).
STEP_FACTOR = 3.4
FACTOR_SOURCE = "the paper's timed run, NeMo-Minitron-8B in 4 bits on one RTX 4090"


@dataclass(frozen=True)
class Device:
    """A device as the prior sees it: memory, memory bandwidth, the bytes a weight takes there, and the source."""

    name: str  # a part of the name torch or nvidia-smi gives it
    memory: float  # bytes (0: not counted)
    bandwidth: float  # bytes per second
    source: str
    value_bytes: int = 2  # bf16 (fp16 on a T4) on a GPU; float32 on the CPU (``devices.resolve_dtype``)


def _gpu(name: str, memory_gb: float, bandwidth_gb: float) -> Device:
    return Device(name, memory_gb * 1e9, bandwidth_gb * 1e9, "the maker's data sheet")


# The makers' data sheets; the more specific names first (the first whose name is part of the device's counts).
GPUS = (_gpu("H200", 141, 4800), _gpu("H100 NVL", 94, 3900), _gpu("H100 PCIe", 80, 2000), _gpu("H100", 80, 3350),
        _gpu("A100 80GB PCIe", 80, 1935), _gpu("A100-SXM4-80GB", 80, 2039), _gpu("A100", 40, 1555),
        _gpu("A10G", 24, 600), _gpu("L4", 24, 300), _gpu("T4", 16, 320), _gpu("P100", 16, 732),
        _gpu("RTX 4090", 24, 1008))
# No data sheet says what a CPU's step reads at (its arithmetic binds it first): its figure is the one at which the
# prior gives the generation speed the shipped model's dry run measured on the kit's 2-core CPU machine
# (docs/results.md, "The estimate's prior"), so it stands for that CPU alone.
CPU = Device("CPU", 0.0, 4.8e9, "effective: the shipped model's dry run on a 2-core CPU", value_bytes=4)


def gpu_named(name: str) -> Device | None:
    """The GPU whose name is part of ``name`` (as torch or nvidia-smi gives it), or None."""
    return next((device for device in GPUS if device.name.lower() in name.lower()), None)


def device_named(name: str | None) -> Device | None:
    """``gpu_named``, or ``CPU`` for "CPU"; None for a name not on record (or none)."""
    if not name:
        return None
    return CPU if name.strip().upper() == "CPU" else gpu_named(name)


def device_bandwidth(name: str) -> float | None:
    """The data sheet's memory bandwidth of a GPU named ``name`` (bytes per second), or None if not on record."""
    device = gpu_named(name)
    return device.bandwidth if device else None


def visible_gpu_name() -> str | None:
    """The first GPU's name by nvidia-smi (which, unlike torch, opens no CUDA context here); None without one."""
    try:
        listed = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    names = listed.stdout.strip().splitlines() if listed.returncode == 0 else []
    return names[0].strip() if names else None


def parameter_bytes(model) -> int:
    """Bytes of a loaded model's parameters (a tied embedding and head counted once)."""
    return sum(parameter.numel() * parameter.element_size() for parameter in model.parameters())


def kv_bytes_per_token(config, element_bytes: int) -> int:
    """Bytes one token adds to a loaded model's KV cache (``kv_cache_bytes`` of its shape, from its live config)."""
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return config.num_hidden_layers * 2 * heads * head_dim * element_bytes


def decode_floor_seconds(weights: int, cache_tokens: float, bytes_per_token: int, bandwidth: float) -> float:
    """The least time a memory-bound decode step can take: ``weights`` bytes and the cache of ``cache_tokens``
    tokens (all lanes together), each read once, at ``bandwidth`` bytes per second."""
    return (weights + cache_tokens * bytes_per_token) / bandwidth


def count_words(count: float) -> str:
    """A count in readable units: 0.2M, 2.4M, 135M, 8.0B."""
    if count >= 1e9:
        return f"{count / 1e9:.1f}B"
    return f"{count / 1e6:.1f}M" if count < 1e7 else f"{count / 1e6:.0f}M"


def sized(shape: Architecture, value_bytes: int = 2) -> str:
    """A model in words: its name, its parameters, its weights' format (``value_bytes`` a weight unless 4-bit)."""
    return f"{shape.name or shape.model_type} ({count_words(parameters(shape).total)} parameters, " \
           f"{4 if shape.four_bit else 8 * value_bytes}-bit)"


# The table's models, shrunk to the kit's alphabet (76 tokens); the shapes are their published config.json's.
SMOLLM2_135M = Architecture("llama", 30, 576, 1536, 9, 3, 64, 76, True, name="SmolLM2-135M")
LLAMA_1B = Architecture("llama", 16, 2048, 8192, 32, 8, 64, 76, True, name="Llama-3.2-1B")
LLAMA_3B = Architecture("llama", 28, 3072, 8192, 24, 8, 128, 76, True, name="Llama-3.2-3B")
NEMO_8B = Architecture("mistral", 40, 4096, 11520, 32, 8, 128, 76, False, name="Mistral-NeMo-Minitron-8B")
NAMED_BASES = {"smollm2-135m": SMOLLM2_135M}  # a delta's base, when it is not built on this machine


def shape_of_folder(path: str | os.PathLike) -> Architecture | None:
    """The shape of a model folder (its config, its base's, or a named base's); None when none says."""
    folder = read_model_folder(path)
    name = folder.base_name or folder.path.name
    if not folder.config and name in NAMED_BASES:  # a delta whose base is not built here
        return NAMED_BASES[name]
    return replace(folder.architecture, name=name) if folder.config.get("num_hidden_layers") else None


CUDA_CONTEXT_BYTES = 2**29  # what each process's CUDA context takes on a GPU besides its tensors (about 0.5 GiB)
MAX_WORKERS_PER_GPU = 8  # 8 processes on one H100 decoded 7.7 times as fast as one; more gain little


def workers_per_gpu_for(peak_bytes: float, total_bytes: float, gpus: int, cpus: int | None = None) -> int:
    """How many workers share one GPU: as many as 90% of its memory holds at the peak (each with its CUDA
    context), at most ``MAX_WORKERS_PER_GPU`` and at most the CPU cores per GPU, at least one."""
    cpus = cpus or os.cpu_count() or 1
    by_memory = int(0.9 * total_bytes // (peak_bytes + CUDA_CONTEXT_BYTES))
    return max(1, min(MAX_WORKERS_PER_GPU, by_memory, cpus // max(1, gpus)))


def first_task_line(planner: Planner, task_id: str, timings: dict | None, memory: dict,
                    gpus: int) -> tuple[int | None, str]:
    """What the first task a pool finishes tells it when it had measured nothing (its timings are the planner's
    already, ``Planner.done``): the actors per GPU its peak memory allows (None when not measured), and the line
    that says what was measured."""
    speeds = planner.speeds
    if not timings:
        line = (f"task {task_id} measured nothing: the planner keeps its guessed speeds "
                f"({speeds.guess or 'the fixed assumption'})")
    else:
        line = (f"measured on task {task_id} in {timings.get('total', 0):.1f} s: {speeds.training:.2e} s per training "
                f"token, {speeds.generation:.2e} s per generated token, {speeds.scoring:.2e} s per scored token")
    per_gpu = None
    if memory.get("peak_bytes") and memory.get("total_bytes"):
        per_gpu = workers_per_gpu_for(memory["peak_bytes"], memory["total_bytes"], gpus)
        line += (f"; peak {memory['peak_bytes'] / 2**30:.2f} GiB of {memory['total_bytes'] / 2**30:.1f} GiB: "
                 f"{per_gpu} worker(s) per GPU")
    return per_gpu, line


@dataclass(frozen=True)
class Typical:
    """The token counts a step's floor depends on: a test input's prompt and answer, the lanes searched together."""

    prompt: float
    answer: float
    lanes: float

    @classmethod
    def of(cls, sizes: Sequence[TaskSize], settings: SolveSettings, lanes: float | None = None) -> Typical:
        """The typical work of ``sizes`` at ``settings``; ``lanes``: searched together (default: as a solve does)."""
        tests = sum(size.tests for size in sizes) or 1
        if lanes is None:
            lanes = settings.inference_augmentations / searches_per_input(settings.inference_augmentations)
        return cls(sum(size.prompt_tokens for size in sizes) / tests or 1.0,
                   sum(size.answer_tokens for size in sizes) / tests, max(1.0, lanes))

    @property
    def context(self) -> float:
        """The tokens a lane's cache holds on average over its answer."""
        return self.prompt + self.answer / 2


def step_seconds(shape: Architecture, device: Device, lanes: float, context: float) -> float:
    """The prior's seconds of one decode step of ``lanes`` lanes of ``context`` tokens: ``STEP_FACTOR`` x its floor."""
    return STEP_FACTOR * decode_floor_seconds(weight_bytes(shape, device.value_bytes), lanes * context,
                                              kv_cache_bytes(shape, 1, 1, device.value_bytes), device.bandwidth)


PRIOR_WORDS = f"the prior: {STEP_FACTOR:g} x the bandwidth floor ({FACTOR_SOURCE})"


def prior_words(device: Device) -> str:
    """The prior for ``device`` in words, with its sources."""
    gigabytes = device.bandwidth / 1e9
    return f"{PRIOR_WORDS}, {device.name} at {gigabytes:,.{0 if gigabytes >= 10 else 1}f} GB/s ({device.source})"


def guessed_speeds(shape: Architecture | None, device: Device | None, settings: SolveSettings,
                   sizes: Sequence[TaskSize], lanes: float | None = None) -> Speeds:
    """The prior's speeds for ``shape`` on ``device`` (the module's docstring), said in ``Speeds.guess``; the kit's
    fixed assumption when the shape or the device is unknown. ``lanes``: searched together (default: as a solve
    does)."""
    if shape is None or device is None:
        return Speeds(guess=f"the kit's fixed assumption (the {'model' if shape is None else 'device'} is unknown)")
    typical = Typical.of(sizes, settings, lanes)
    parallel = PROMPT_TOKEN_WEIGHT * step_seconds(shape, device, 1, typical.context)
    generation = step_seconds(shape, device, typical.lanes, typical.context) / typical.lanes
    return Speeds(parallel, generation, parallel, guess=f"{sized(shape, device.value_bytes)} on {device.name}: "
                  f"{prior_words(device)}")


def guessed_on(shape: Architecture | None, device_name: str, settings: SolveSettings,
               sizes: Sequence[TaskSize]) -> Speeds:
    """``guessed_speeds`` on the device named ``device_name`` (a GPU's name, or "CPU"); the fixed assumption for a
    device not on record."""
    device = device_named(device_name)
    if device is None:
        return Speeds(guess=f"the kit's fixed assumption ({device_name} is not on record)")
    return guessed_speeds(shape, device, settings, sizes)


def first_speeds(model: str | os.PathLike, settings: SolveSettings, sizes: Sequence[TaskSize],
                 device_name: str | None) -> Speeds:
    """``guessed_on`` for a model folder on the named GPU (None: the CPU)."""
    try:
        shape = shape_of_folder(model)
    except (OSError, ValueError, KeyError, TypeError) as error:  # a first guess never stops a run
        return Speeds(guess=f"the kit's fixed assumption (the model's config: {type(error).__name__})")
    return guessed_on(shape, device_name or CPU.name, settings, sizes)


def device_of(torch_device) -> str:
    """The name the prior knows a torch device by: the GPU's name, or "CPU"."""
    if torch_device.type != "cuda":
        return CPU.name
    import torch

    return torch.cuda.get_device_name(torch_device)


def speeds_for_model(model, settings: SolveSettings, sizes: Sequence[TaskSize]) -> Speeds:
    """``guessed_on`` for a loaded model (transformers or peft), on the device its weights are on."""
    config, parameter = getattr(model, "config", None), next(iter(model.parameters()), None)
    if config is None or parameter is None or not getattr(config, "num_hidden_layers", None):
        return Speeds(guess="the kit's fixed assumption (the model has no transformers config)")
    shape = architecture_of(config.to_dict(), "the model's config")
    shape = shape.with_four_bit() if getattr(model, "is_loaded_in_4bit", False) else shape
    return guessed_on(shape, device_of(parameter.device), settings, sizes)


# -- the table: the prior per model size and GPU -------------------------------------------------------------------

TABLE_SHAPES = (SMOLLM2_135M, LLAMA_1B, LLAMA_1B.with_four_bit(), LLAMA_3B, LLAMA_3B.with_four_bit(), NEMO_8B,
                NEMO_8B.with_four_bit())
TABLE_MACHINES = ((gpu_named("L4"), 4, "4x L4 (Kaggle)"), (gpu_named("T4"), 1, "T4"), (gpu_named("H100"), 1, "H100"))
PAPER_CHECK_TASKS = "arc-agi-1/evaluation"  # the set the paper's timed run solved
# The paper's Table 3 and appendix (the authors' run, not the kit's): NeMo-Minitron-8B in 4 bits on one RTX 4090,
# the 400 ARC-AGI-1 evaluation tasks, 16 + 16 augmentations, DFS at T = 9%: test-time training 51 s a task,
# candidate generation 9:32 h, 20:50 h in all.
PAPER_RUN = {"training": 400 * 51.0, "generation": 9 * 3600 + 32 * 60.0, "total": 20 * 3600 + 50 * 60.0}


def expected_seconds(sizes: list[TaskSize], settings: SolveSettings, shape: Architecture, device: Device, gpus: int,
                     lanes: int | None = None) -> tuple[dict[str, float], int] | str:
    """The prior's wall seconds per part (and total) of ``sizes`` for ``shape`` on ``gpus`` of ``device``, and the
    lanes a worker holds (halved, as the engine halves them, while its cache does not fit; ``lanes``: searched
    together, default as a solve does); why not, in words, when the weights alone do not fit."""
    typical = Typical.of(sizes, settings, lanes)
    held = settings.inference_augmentations if lanes is None else lanes

    def need(count: float) -> float:
        cache = count * (typical.prompt + typical.answer) * kv_cache_bytes(shape, 1, 1, device.value_bytes)
        return weight_bytes(shape, device.value_bytes) + cache + CUDA_CONTEXT_BYTES

    while held > 1 and need(held) > 0.9 * device.memory:
        held //= 2
    if need(held) > 0.9 * device.memory:
        return f"does not fit ({weight_bytes(shape) / 1e9:.1f} GB of weights, {device.memory / 1e9:.0f} GB)"
    lanes = typical.lanes * held / (settings.inference_augmentations if lanes is None else lanes)
    speeds = guessed_speeds(shape, device, settings, sizes, lanes=lanes)
    seconds = {part: getattr(speeds, part) * sum(work_units(size, settings)[part] for size in sizes) / gpus
               for part, _ in PARTS}
    return {**seconds, "total": sum(seconds.values())}, held


def expectations_table(sizes: list[TaskSize], settings: SolveSettings, what: str) -> list[str]:
    """The table's lines: a row per model (``TABLE_SHAPES``), a column per machine (``TABLE_MACHINES``)."""
    lines = [f"expected hours for {what} at {settings.description}, by {PRIOR_WORDS} (no cell "
             "measured)", "",
             "| model | parameters | " + " | ".join(label for *_, label in TABLE_MACHINES) + " |",
             "|---|---|" + "---|" * len(TABLE_MACHINES)]
    for shape in TABLE_SHAPES:
        cells = []
        for device, gpus, _ in TABLE_MACHINES:
            cell = expected_seconds(sizes, settings, shape, device, gpus)
            if isinstance(cell, str):
                cells.append(cell)
            else:
                seconds, held = cell
                fewer = f" ({held} lanes)" if held < settings.inference_augmentations else ""
                cells.append(f"{seconds['total'] / 3600:.1f} h{fewer}")
        bits = "4-bit" if shape.four_bit else "16-bit"
        lines.append(f"| {shape.name}, {bits} | {count_words(parameters(shape).total)} | " + " | ".join(cells) + " |")
    bandwidths = ", ".join(f"{device.name} {device.bandwidth / 1e9:,.0f} GB/s" for device, *_ in TABLE_MACHINES)
    return lines + ["", f"bandwidths: {bandwidths} (the makers' data sheets); a GPU's workers share its bandwidth"]


def paper_check(sizes: list[TaskSize], settings: SolveSettings) -> str:
    """The prior against the paper's own run (``PAPER_RUN``), on ``sizes`` (the 400 ARC-AGI-1 tasks)."""
    seconds, _ = expected_seconds(sizes, settings, NEMO_8B.with_four_bit(), gpu_named("RTX 4090"), 1, lanes=1)
    predicted = {part: hours(value) for part, value in seconds.items()}
    measured = {part: hours(value) for part, value in PAPER_RUN.items()}
    return (f"check against the paper's run (NeMo-Minitron-8B, 4-bit, one RTX 4090, {len(sizes)} tasks, one "
            f"augmentation searched at a time): TTT {predicted['training']} (paper {measured['training']}), "
            f"generation {predicted['generation']} (paper {measured['generation']}), scoring "
            f"{predicted['scoring']}; total {predicted['total']} (paper {measured['total']}), "
            f"{seconds['total'] / PAPER_RUN['total']:.2f}x the paper's")


def expectations_for(tasks: TaskSet, model: str | os.PathLike, settings: SolveSettings, what: str) -> list[str]:
    """The model size x GPU table for ``tasks`` at ``settings`` (tokens counted by ``model``'s tokenizer: every
    shrunk model writes a symbol a token), and the paper's timed run priced the same way."""
    folder = read_model_folder(model)
    settings = settings.replace(max_len=folder.token_budget(settings.max_len))
    encoder = folder.encoder(max_len=settings.max_len)
    table = expectations_table([measure(task, encoder, settings.max_len) for task in tasks.tasks()], settings, what)
    paper = [measure(task, encoder, settings.max_len) for task in load_tasks(PAPER_CHECK_TASKS).tasks()]
    return [*table, "", paper_check(paper, settings)]
