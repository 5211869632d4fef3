"""``arc-kit estimate --table``: the hours a set of tasks takes at a setting, per model size and machine.

Every cell is derived, none measured (no run of a whole task set on a GPU is on record): the tasks' work
units (``planner.work_units``, from their token counts) priced by ``expectations.part_costs`` (host overhead
plus floor times ratio, each from a measurement it names), as many worker processes a GPU as its memory
holds at the weights and the lanes' KV cache (``workers_per_gpu_for``; their overheads overlap,
the GPU's own time does not), the work shared by the machine's GPUs. A cell also gives the least time, every
part at its floor with no overhead. A model whose weights and cache do not fit one GPU says so.

``paper_check`` prices the one run of a large model whose time is published, the paper's (NeMo-Minitron-8B
in 4 bits, one RTX 4090, 400 ARC-AGI-1 evaluation tasks, its DFS searching one augmentation at a time), so
that the table's error can be judged against it; it prices transformers' own decode (its forward and caches,
as the authors' code decodes). This module formats; it measures nothing.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from arc_kit.model.memory import Architecture, kv_cache_bytes, parameters, weight_bytes
from arc_kit.run.expectations import (
    BANDWIDTH_RATIO,
    COMPUTE_RATIO,
    DECODE_OVERHEAD,
    FAST_BANDWIDTH_RATIO,
    FAST_DECODE_OVERHEAD,
    MEASUREMENTS,
    NEMO_8B,
    TABLE_SHAPES,
    TRAINING_OVERHEAD,
    Device,
    Typical,
    decodes_on_fast_engine,
    gpu_named,
    part_costs,
)
from arc_kit.run.planner import PARTS, TaskSize, hours, work_units
from arc_kit.settings import SolveSettings


@dataclass(frozen=True)
class Machine:
    device: Device
    count: int  # GPUs
    label: str


TABLE_MACHINES = (Machine(gpu_named("L4"), 4, "4x L4 (Kaggle)"), Machine(gpu_named("T4"), 1, "T4"),
                  Machine(gpu_named("H100"), 1, "H100"))
# The paper's Table 3 and appendix (the authors' run, not the kit's): NeMo-Minitron-8B in 4 bits on one RTX 4090,
# the 400 ARC-AGI-1 evaluation tasks, 16 + 16 augmentations, DFS at T = 9%: test-time training 51 s a task,
# candidate generation 9:32 h, 20:50 h in all.
PAPER_RUN = {"training": 400 * 51.0, "generation": 9 * 3600 + 32 * 60.0, "total": 20 * 3600 + 50 * 60.0}
CUDA_CONTEXT_BYTES = 2**29  # what each process's CUDA context takes on a GPU besides its tensors (about 0.5 GiB)
MAX_WORKERS_PER_GPU = 8  # 8 processes on one H100 decoded 7.7 times as fast as one; more gain little


def workers_per_gpu_for(peak_bytes: float, total_bytes: float, gpus: int, cpus: int | None = None) -> int:
    """How many actors share one GPU: as many as 90% of its memory holds at the measured peak (each with its CUDA
    context), at most ``MAX_WORKERS_PER_GPU`` and at most the CPU cores per GPU, at least one."""
    cpus = cpus or os.cpu_count() or 1
    by_memory = int(0.9 * total_bytes // (peak_bytes + CUDA_CONTEXT_BYTES))
    return max(1, min(MAX_WORKERS_PER_GPU, by_memory, cpus // max(1, gpus)))


@dataclass
class Cell:
    """One model on one machine: seconds per part and in all, the workers a GPU and the lanes each decodes
    together, the least seconds."""

    seconds: dict[str, float] = field(default_factory=dict)  # training, generation, scoring, total
    workers: int = 0
    lanes: int = 0  # the KV cache's lanes a worker holds (fewer than the augmentations where memory is short)
    least: float = 0.0
    unfit: str = ""  # why the model does not fit one GPU ("" when it does)

    def text(self, lanes: int) -> str:
        if self.unfit:
            return f"does not fit ({self.unfit})"
        fewer = f", {self.lanes} lanes" if self.lanes < lanes else ""
        return f"{self.seconds['total'] / 3600:.1f} h d ({self.workers}/GPU{fewer}; least {self.least / 3600:.2f} h)"


def worker_bytes(shape: Architecture, typical: Typical, lanes: int) -> float:
    """What one worker holds on its GPU: the weights, and the KV cache of ``lanes`` lanes of a test input."""
    return weight_bytes(shape) + lanes * (typical.prompt + typical.answer) * kv_cache_bytes(shape, 1, 1)


def expected_cell(sizes: Sequence[TaskSize], settings: SolveSettings, shape: Architecture, machine: Machine,
                  workers: int | None = None, lanes: float | None = None) -> Cell:
    """The seconds ``sizes`` take at ``settings`` for ``shape`` on ``machine`` (``workers`` a GPU: as many as fit;
    the lanes halved, as the engine halves them, while a worker's cache does not fit; ``lanes``: searched
    together, default as a solve does)."""
    typical = Typical.of(sizes, settings, lanes)
    memory, lanes = machine.device.memory, settings.inference_augmentations
    while lanes > 1 and worker_bytes(shape, typical, lanes) + CUDA_CONTEXT_BYTES > 0.9 * memory:
        lanes //= 2
    need = worker_bytes(shape, typical, lanes)
    if need + CUDA_CONTEXT_BYTES > 0.9 * memory:
        return Cell(unfit=f"{weight_bytes(shape) / 1e9:.1f} GB of weights, {memory / 1e9:.0f} GB")
    typical = replace(typical, lanes=max(1.0, typical.lanes * lanes / settings.inference_augmentations))
    workers = workers or workers_per_gpu_for(need, memory, 1, cpus=MAX_WORKERS_PER_GPU)
    units = {part: 0.0 for part, _ in PARTS}
    for size in sizes:
        for part, amount in work_units(size, settings).items():
            units[part] += amount
    costs = part_costs(shape, machine.device, typical, decodes_on_fast_engine(settings))
    seconds = {part: units[part] * costs[part].with_workers(workers) / machine.count for part in units}
    least = sum(units[part] * costs[part].floor for part in units) / machine.count
    return Cell({**seconds, "total": sum(seconds.values())}, workers, lanes, least)


def ratio_lines() -> list[str]:
    """What every derived cell rests on: each overhead and ratio, and the measurement it comes from."""
    lines = [f"- {name}: {measurement.value:.6g}, {measurement.what} ({measurement.source})"
             for name, measurement in MEASUREMENTS.items() if name != "cpu_speeds"]
    return lines + [
        f"- decode overhead: {DECODE_OVERHEAD * 1e3:.2f} ms a layer a step (decode_step less its bandwidth floor, "
        "over 30 layers); a scoring forward's overhead is priced the same",
        f"- training overhead: {TRAINING_OVERHEAD * 1e3:.2f} ms a layer a step, and compute ratio: "
        f"{COMPUTE_RATIO:.2f} x the arithmetic floor at the GPU's peak (ttt_step and finetune_step, each a step's "
        "overhead plus the ratio times its arithmetic at the H100's 989 TFLOP/s, solved together); scoring "
        "forwards' arithmetic takes the same ratio",
        f"- the engine (compiled, CUDA graphs): decode overhead {FAST_DECODE_OVERHEAD * 1e3:.3f} ms a layer a step "
        f"and bandwidth ratio {FAST_BANDWIDTH_RATIO:.2f} x the decode floor (fast_overhead_step and fast_step, each "
        "28 layers' overhead plus the ratio times its floor, solved together); "
        "generation is priced so when the settings decode on it (the default), 4-bit models' at the bf16 figures "
        "(the engine's 4-bit GPU step is not measured); scoring forwards are priced as transformers'",
        f"- transformers' decode's bandwidth ratio: {BANDWIDTH_RATIO:g} x the decode floor: not measured (the 135M "
        "model's step is all overhead)"]


def expectations_table(sizes: Sequence[TaskSize], settings: SolveSettings, what: str) -> list[str]:
    """The table's lines: a row per model (``TABLE_SHAPES``), a column per machine (``TABLE_MACHINES``), each cell
    derived (d); the ratios below it."""
    engine = "the compiled engine's decode" if decodes_on_fast_engine(settings) else "transformers' decode"
    lines = [f"expected hours for {what} at {settings.description}; d: derived (host overhead + floor x "
             f"measured ratio, {engine}), no cell measured; least: every part at its floor",
             "", "| model | parameters | " + " | ".join(machine.label for machine in TABLE_MACHINES) + " |",
             "|---|---|" + "---|" * len(TABLE_MACHINES)]
    for shape in TABLE_SHAPES:
        cells = [expected_cell(sizes, settings, shape, machine).text(settings.inference_augmentations)
                 for machine in TABLE_MACHINES]
        bits = "4-bit" if shape.four_bit else "bf16"
        lines.append(f"| {shape.name}, {bits} | {parameters(shape).total / 1e9:.2f}B | " + " | ".join(cells) + " |")
    return lines + ["", "ratios:", *ratio_lines()]


def paper_check(sizes: Sequence[TaskSize], settings: SolveSettings) -> str:
    """The table's model against the paper's own run (``PAPER_RUN``), on ``sizes`` (the 400 ARC-AGI-1 tasks)."""
    machine = Machine(gpu_named("RTX 4090"), 1, "RTX 4090")
    cell = expected_cell(sizes, settings.replace(engine_compile="off"), NEMO_8B.with_four_bit(), machine, workers=1,
                         lanes=1)
    predicted = {part: hours(seconds) for part, seconds in cell.seconds.items()}
    measured = {part: hours(seconds) for part, seconds in PAPER_RUN.items()}
    return (f"check against the paper's run (NeMo-Minitron-8B, 4-bit, one RTX 4090, {len(sizes)} tasks, one "
            f"augmentation searched at a time): TTT {predicted['training']} (paper {measured['training']}), "
            f"generation {predicted['generation']} (paper {measured['generation']}), scoring "
            f"{predicted['scoring']}; total {predicted['total']} (paper {measured['total']}), "
            f"{cell.seconds['total'] / PAPER_RUN['total']:.2f}x the paper's")
