"""``arc-kit bench --which engine``: the decode engine's step against transformers' own forward, 16 lanes.

Two models, each with the test-time LoRA a solve attaches (``optimization.add_lora``: rank 32, alpha
16, every linear layer, embeddings and head saved): the model benchmarked and a model of its depth at
width 64 with random weights, whose step is almost all framework overhead (as ``scripts/decode_bench.py
--overhead-only`` measures it). Each runs 16 lanes, a typical task's test input (the median prompt
length of the tasks given) under the solver's 16 inference augmentations, through the engine and
through ``transformers_forward.TransformersDecoder`` (one lane at a time: what runs a model the engine
cannot): prompts prefilled (not timed), a few steps to warm up (a compiled step compiles there), then
steps in turns, each lane feeding its most probable token. The figure is the median seconds per step;
the two NLLs are compared on every step. The width-64 model runs on the same prompts (at 16 lanes of a
long prompt, reading the cache is most of its step) and on the prompts cut to ``OVERHEAD_PROMPT``
tokens: the framework overhead line. On CUDA it also gives the engine's tokens per second per process
for 1 and 16 lanes against the memory-bandwidth floor (``decode_floor_seconds``). The output ends with
``engine speed-up: X.XXx (overhead, width 64, 16 lanes)``.

``engine_agreement`` compares the two's DFS candidates rather than their steps (in the drafts bench's
loop, ``drafts_bench.compare_searches``), for the GPU check (``scripts/gpu_check.py``).
"""

from __future__ import annotations

import copy
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from arc_kit.data.augmentation import Augmentation
from arc_kit.data.tasks import Task
from arc_kit.experiments.drafts_bench import compare_searches
from arc_kit.method.answers import AnswerSpace
from arc_kit.method.engine import Engine, compiles
from arc_kit.method.solver import Solver
from arc_kit.method.transformers_forward import TransformersDecoder
from arc_kit.model.optimization import add_lora
from arc_kit.run.expectations import decode_floor_seconds, device_bandwidth, kv_bytes_per_token
from arc_kit.settings import TEST_TIME_TRAINING, SamplerSettings, SolveSettings
from arc_kit.text import TaskEncoder

LANES = 16
OVERHEAD_PROMPT = 64  # the overhead line's prompts: short, so that the cache's reads do not hide the framework's


@dataclass
class EngineBenchResult:
    """Per-step seconds of the engine and of transformers' forward on each model, and what the engine does on CUDA."""

    rows: list[tuple[str, float, float, str]] = field(default_factory=list)  # (model, engine, transformers, note)
    throughput: list[Throughput] = field(default_factory=list)  # on CUDA, or where a bandwidth was given
    device_name: str = ""  # the throughput's device
    largest_difference: float = 0.0  # the largest NLL difference between the two on the model benchmarked

    def lines(self) -> list[str]:
        lines = [f"engine: {LANES} lanes, {name}: engine {ours * 1e3:.2f} ms/step, transformers "
                 f"{theirs * 1e3:.2f} ms/step; {note}" for name, ours, theirs, note in self.rows]
        (_, ours, theirs, _), (_, overhead_ours, overhead_theirs, _) = self.rows[0], self.rows[-1]
        lines.append(f"engine speed-up at real width: {theirs / ours:.2f}x ({LANES} lanes)")
        lines += [measured.line(self.device_name) for measured in self.throughput]
        if len(self.rows) > 1:  # the width-64 rows were measured
            lines.append(f"engine speed-up: {overhead_theirs / overhead_ours:.2f}x (overhead, width 64, "
                         f"{LANES} lanes)")
        return lines


def overhead_model(model):
    """A model of ``model``'s depth and vocabulary at width 64 (random weights): framework overhead only."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = model.config
    narrow = LlamaConfig(vocab_size=config.vocab_size, num_hidden_layers=config.num_hidden_layers, hidden_size=64,
                         intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=config.max_position_embeddings, tie_word_embeddings=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        narrow_model = LlamaForCausalLM(narrow)
    parameter = next(model.parameters())
    return narrow_model.to(device=parameter.device, dtype=parameter.dtype).eval()


def lane_prompts(encoder: TaskEncoder, task: Task, lanes: int = LANES, seed: int = 0) -> list[list[int]]:
    """The prompts of ``task``'s first test input under ``lanes`` inference augmentations, as the solver draws them."""
    views = Augmentation.inference_set(np.random.default_rng(seed), len(task.train), lanes)
    return [list(map(int, encoder.encode_prompt(view.apply_pairs(task.train), view.apply_grid(task.test[0].input)).ids))
            for view in views]


def typical_task(encoder: TaskEncoder, tasks: Sequence[Task]) -> Task:
    """The task whose prompt length is the median of ``tasks``' (the lower one of an even count)."""
    ordered = sorted(tasks, key=lambda task: (len(encoder.encode_prompt(task.train, task.test[0].input)), task.id))
    return ordered[(len(ordered) - 1) // 2]


def synchronize(device) -> None:
    """Wait for the device's queued work (a CUDA device's; the CPU's is done when a call returns)."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def _timed_steps(engines: dict, prompts: Sequence[Sequence[int]], space: AnswerSpace, steps: int,
                 warmup: int) -> tuple[dict[str, float], float]:
    """Median seconds per step of each engine (their steps taken in turns), and the largest NLL difference."""
    import torch

    width = max(len(prompt) for prompt in prompts)
    device = next(next(iter(engines.values())).model.parameters()).device
    times: dict[str, list[float]] = {name: [] for name in engines}
    positions = [len(prompt) for prompt in prompts]
    for engine in engines.values():
        engine.start(len(prompts), width + warmup + steps + 1, space)
        first = [engine.prefill(lane, prompt, len(prompt))[-1] for lane, prompt in enumerate(prompts)]
    tokens = [int(np.argmin(row)) for row in first]  # every engine feeds the same tokens: the last one's choice
    largest = 0.0
    try:
        for step in range(warmup + steps):
            found = {}
            for name, engine in engines.items():
                synchronize(device)
                started = time.perf_counter()
                with torch.no_grad():
                    found[name] = np.stack([rows[0] for rows in engine.step([[token] for token in tokens],
                                                                            positions)])
                synchronize(device)
                if step >= warmup:
                    times[name].append(time.perf_counter() - started)
            rows = list(found.values())
            for other in rows[1:]:
                finite = np.isfinite(rows[0])
                largest = max(largest, float(np.abs(other[finite] - rows[0][finite]).max()))
            tokens = [int(np.argmin(row)) for row in rows[0]]
            positions = [position + 1 for position in positions]
    finally:
        for engine in engines.values():
            engine.release()
    return {name: statistics.median(values) for name, values in times.items()}, largest


def _model_row(model, name: str, prompts, space: AnswerSpace, steps: int, warmup: int, compile: str = "auto"):
    """(name, engine seconds, transformers seconds, note) of one model's 16 lanes (the note says the largest NLL
    difference between the two), its engine and that difference."""
    lora = TEST_TIME_TRAINING  # the test-time adapter a solve attaches (its defaults), on a copy, adapter on
    adapted = add_lora(copy.deepcopy(model), lora.lora_rank, lora.lora_alpha, lora.train_embeddings,
                       adapter_name="ttt").eval()
    engines = {"engine": Engine(adapted, compile=compiles(compile, adapted)),
               "transformers": TransformersDecoder(adapted)}
    seconds, largest = _timed_steps(engines, prompts, space, steps, warmup)
    lengths = sorted(len(prompt) for prompt in prompts)
    note = (f"median of {steps} steps, prompts of {lengths[0]}-{lengths[-1]} tokens, a rank-"
            f"{TEST_TIME_TRAINING.lora_rank} test-time LoRA attached, engine step "
            f"{'compiled' if engines['engine'].compiled else 'eager'}; largest NLL difference {largest:.1e}")
    return (name, seconds["engine"], seconds["transformers"], note), engines["engine"], largest


@dataclass(frozen=True)
class Throughput:
    """The engine's median step at ``lanes`` lanes, and the bandwidth floor of that step (None: unknown)."""

    lanes: int
    seconds: float  # per step
    floor_seconds: float | None
    bandwidth: float | None  # bytes/s the floor is measured at

    @property
    def tokens_per_second(self) -> float:
        return self.lanes / self.seconds

    @property
    def floor_ratio(self) -> float | None:
        return None if self.floor_seconds is None else self.seconds / self.floor_seconds

    def line(self, device_name: str) -> str:
        line = f"engine on {device_name}: {self.lanes} lane(s), {self.tokens_per_second:.0f} tokens/s per " \
               f"process ({self.seconds * 1e3:.3f} ms/step)"
        if self.floor_seconds is not None:
            line += f", {self.floor_ratio:.1f}x the bandwidth floor ({self.floor_seconds * 1e3:.3f} ms at " \
                    f"{self.bandwidth / 1e9:.0f} GB/s)"
        return line


def throughput(engine, prompts, space: AnswerSpace, steps: int, warmup: int,
               bandwidth: float | None) -> list[Throughput]:
    """The engine's step for 1 and 16 lanes, against the floor at ``bandwidth`` bytes/s (None: no floor; a GPU's is
    ``expectations.device_bandwidth``, the maker's data sheet)."""
    import torch

    decode_bytes = sum(tensor.numel() * tensor.element_size() for tensor in engine.weights.tensors())
    per_token = kv_bytes_per_token(engine.weights.config, torch.finfo(engine.dtype).bits // 8)
    found = []
    for lanes in (1, LANES):
        chosen = prompts[:lanes]
        seconds = _timed_steps({"engine": engine}, chosen, space, steps, warmup)[0]["engine"]
        floor = None if bandwidth is None else \
            decode_floor_seconds(decode_bytes, sum(len(p) for p in chosen), per_token, bandwidth)
        found.append(Throughput(lanes, seconds, floor, bandwidth))
    return found


def bench_engine(model, encoder: TaskEncoder, tasks: Sequence[Task], *, steps: int = 24, warmup: int = 3,
                 probabilities: str = SolveSettings().probabilities, label: str = "the model",
                 compile: str = SolveSettings().engine_compile, bandwidth: float | None = None,
                 overhead: bool = True) -> EngineBenchResult:
    """The engine's step against transformers' forward, 16 lanes, at real width and at width 64 (module docstring).

    ``compile``: ``engine.make_engine``'s option (auto: compiled on a GPU only).
    ``bandwidth`` (bytes/s): measure the throughput against this floor off CUDA too (on CUDA: the card's,
    when on record). ``overhead``: also the width-64 rows.
    """
    if not tasks:
        raise ValueError("the engine benchmark needs a task (its prompts)")
    space = AnswerSpace.from_encoder(encoder, probabilities)
    prompts = lane_prompts(encoder, typical_task(encoder, tasks))
    row, engine, largest = _model_row(model, label, prompts, space, steps, warmup, compile)
    result, layers = EngineBenchResult([row], largest_difference=largest), model.config.num_hidden_layers
    if engine.device.type == "cuda" or bandwidth is not None:
        import torch

        name = torch.cuda.get_device_name(engine.device) if engine.device.type == "cuda" else engine.device.type
        bandwidth = bandwidth if bandwidth is not None else device_bandwidth(name)
        result.throughput, result.device_name = throughput(engine, prompts, space, steps, warmup, bandwidth), name
    del engine
    if not overhead:
        return result
    narrow = overhead_model(model)
    for name, chosen in ((f"width 64, {layers} layers", prompts),
                         (f"width 64, {layers} layers, prompts cut to {OVERHEAD_PROMPT} tokens",
                          [prompt[:OVERHEAD_PROMPT] for prompt in prompts])):
        result.rows.append(_model_row(narrow, name, chosen, space, steps, warmup, compile)[0])
    return result


@dataclass
class EngineAgreement:
    """The engine's DFS candidates against transformers' forward's, test input by test input."""

    inputs: int = 0
    candidates: int = 0  # transformers', all test inputs together
    differing: list[str] = field(default_factory=list)  # test inputs whose candidate grids differ
    largest: float = 0.0  # the largest NLL difference on the test inputs whose grids agree
    seconds: dict[str, float] = field(default_factory=dict)  # per side, its searches together
    compiled: bool = False  # the engine's step was compiled

    def line(self) -> str:
        same = "the same candidates" if not self.differing else \
            f"candidates differ on {len(self.differing)} test input(s): {', '.join(self.differing[:3])}"
        return (f"engine agrees with transformers: {self.inputs} test inputs, {self.candidates} candidates, {same}, "
                f"largest NLL difference {self.largest:.1e}; engine{' (compiled)' if self.compiled else ''} "
                f"{self.seconds.get('engine', 0):.1f} s, transformers {self.seconds.get('transformers', 0):.1f} s")


def engine_agreement(model, encoder: TaskEncoder, tasks: Sequence[Task], *, threshold: float, augmentations: int,
                     compile: str = SolveSettings().engine_compile, probabilities: str = "full",
                     seed: int = 0, progress=None) -> EngineAgreement:
    """Every test input of ``tasks`` searched (DFS at ``threshold``, drafts on, no test-time training) under the
    same ``augmentations`` views on the engine and on transformers' forward; their candidates compared.
    ``progress``: called with the result so far after each test input."""
    settings = SolveSettings(test_time_training=False, probabilities=probabilities,
                             inference_augmentations=augmentations, seed=seed, engine_compile=compile)
    sampler = SamplerSettings("dfs", threshold=threshold)
    engine = Solver(model, encoder, settings)
    searches = {"engine": (engine, sampler),
                "transformers": (Solver(model, encoder, settings, engine=TransformersDecoder(model)), sampler)}
    result = EngineAgreement(seconds={side: 0.0 for side in searches})
    for totals in compare_searches(tasks, searches, "transformers", tolerance=math.inf):
        result = EngineAgreement(result.inputs + 1, totals["transformers"].candidates, totals["engine"].differing,
                                 totals["engine"].largest, {side: total.seconds for side, total in totals.items()},
                                 bool(getattr(engine.engine(), "compiled", False)))
        if progress is not None:
            progress(result)
    return result
