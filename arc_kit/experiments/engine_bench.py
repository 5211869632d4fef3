"""``arc-kit bench --which engine``: the fast decode engine's step against the reference engine's, 16 lanes.

Two models, each with a test-time LoRA attached as a solve attaches it (``ttt.TestTimeTrainer``'s
``optimization.add_lora``: rank 32, alpha 16, every linear layer, embeddings and head saved): the
model benchmarked (the shipped one by default) and a model of the same depth at width 64 with
random weights, whose step is almost all framework overhead (as ``scripts/decode_bench.py
--overhead-only`` measures it). Each runs 16 lanes, the prompts of a typical task's test input
(the median prompt length of the tasks given) under the solver's 16 inference augmentations,
through both engines at once: the prompts
prefilled (not timed), a few steps to warm up (a compiled step compiles there), then steps in
turns, fast and reference, each lane feeding its most probable token at its next position. The
figure is the median seconds per step; the two engines' NLLs are compared on every step. The width-64
model runs twice: on the same prompts (at 16 lanes of a long prompt, reading the cache is most of
its step, the same work in both engines) and on the prompts cut to their first ``OVERHEAD_PROMPT``
tokens, the framework overhead line: what each engine costs beyond the arithmetic. On CUDA it
also gives the fast engine's tokens per second per process for 1 and 16 lanes and its time against
the memory-bandwidth floor (``decode_floor_seconds``: the decode weights and the lanes' cache read
once per step). The output ends with the line ``engine speed-up: X.XXx (overhead, width 64, 16 lanes)``.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from arc_kit.data.augmentation import Augmentation
from arc_kit.data.tasks import Task
from arc_kit.method.answers import AnswerSpace
from arc_kit.method.engines import make_engine
from arc_kit.model.optimization import add_lora
from arc_kit.run.bandwidth import decode_floor_seconds, device_bandwidth, kv_bytes_per_token
from arc_kit.settings import SolveSettings, TestTimeSettings
from arc_kit.text import TaskEncoder

LANES = 16
OVERHEAD_PROMPT = 64  # the overhead line's prompts: short, so that the cache's reads do not hide the framework's


@dataclass
class EngineBenchResult:
    """Per-step seconds of both engines on each model, and what the fast engine does on CUDA."""

    rows: list[tuple[str, float, float, str]] = field(default_factory=list)  # (model, fast, reference, note)
    cuda: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        lines = [f"engine: {LANES} lanes, {name}: fast {fast * 1e3:.2f} ms/step, reference {reference * 1e3:.2f} "
                 f"ms/step; {note}" for name, fast, reference, note in self.rows]
        (_, fast, reference, _), (_, overhead_fast, overhead_reference, _) = self.rows[0], self.rows[-1]
        lines.append(f"engine speed-up at real width: {reference / fast:.2f}x ({LANES} lanes)")
        lines += self.cuda
        lines.append(f"engine speed-up: {overhead_reference / overhead_fast:.2f}x (overhead, width 64, {LANES} lanes)")
        return lines


def with_test_time_lora(model):
    """A copy of ``model`` wrapped in the test-time adapter a solve attaches (its defaults), adapter on."""
    settings = TestTimeSettings()
    return add_lora(copy.deepcopy(model), settings.lora_rank, settings.lora_alpha, settings.train_embeddings,
                    adapter_name="ttt").eval()


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


def _synchronize(device) -> None:
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
                _synchronize(device)
                started = time.perf_counter()
                with torch.no_grad():
                    found[name] = engine.step(tokens, positions)
                _synchronize(device)
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
    """(name, fast seconds, reference seconds, note) of one model's 16 lanes, and its fast engine."""
    adapted = with_test_time_lora(model)
    engines = {"fast": make_engine(adapted, "fast", compile=compile), "reference": make_engine(adapted, "reference")}
    if engines["fast"].kind != "fast":
        raise ValueError(f"the fast engine cannot run {name}: nothing to compare")
    seconds, largest = _timed_steps(engines, prompts, space, steps, warmup)
    lengths = sorted(len(prompt) for prompt in prompts)
    note = (f"median of {steps} steps, prompts of {lengths[0]}-{lengths[-1]} tokens, a rank-"
            f"{TestTimeSettings().lora_rank} test-time LoRA attached, fast step "
            f"{'compiled' if engines['fast'].compiled else 'eager'}; largest NLL difference {largest:.1e}")
    return (name, seconds["fast"], seconds["reference"], note), engines["fast"]


def throughput_lines(engine, prompts, space: AnswerSpace, steps: int, warmup: int, device_name: str) -> list[str]:
    """Tokens per second per process of the fast engine for 1 and 16 lanes, against the bandwidth floor of
    ``device_name``'s memory (``PEAK_BANDWIDTH``; the ratio is left out for a device not on record)."""
    import torch

    bandwidth = device_bandwidth(device_name)
    decode_bytes = sum(tensor.numel() * tensor.element_size() for tensor in engine.weights.tensors())
    per_token = kv_bytes_per_token(engine.weights.config, torch.finfo(engine.dtype).bits // 8)
    lines = []
    for lanes in (1, LANES):
        chosen = prompts[:lanes]
        seconds = _timed_steps({"fast": engine}, chosen, space, steps, warmup)[0]["fast"]
        line = f"engine on {device_name}: {lanes} lane(s), {lanes / seconds:.0f} tokens/s per process " \
               f"({seconds * 1e3:.3f} ms/step)"
        if bandwidth is not None:
            floor = decode_floor_seconds(decode_bytes, sum(len(p) for p in chosen), per_token, bandwidth)
            line += f", {seconds / floor:.1f}x the bandwidth floor ({floor * 1e3:.3f} ms at {bandwidth / 1e9:.0f} GB/s)"
        lines.append(line)
    return lines


def bench_engine(model, encoder: TaskEncoder, tasks: Sequence[Task], *, steps: int = 24, warmup: int = 3,
                 probabilities: str = SolveSettings().probabilities, label: str = "the model",
                 compile: str = SolveSettings().engine_compile) -> EngineBenchResult:
    """The fast engine's step against the reference's, 16 lanes, at real width and at width 64 (module docstring).

    ``compile``: the fast engine's ``engines.make_engine`` option (auto: compiled on a GPU only).
    """
    if not tasks:
        raise ValueError("the engine benchmark needs a task (its prompts)")
    space = AnswerSpace.from_encoder(encoder, probabilities)
    prompts = lane_prompts(encoder, typical_task(encoder, tasks))
    result = EngineBenchResult()
    layers = model.config.num_hidden_layers
    row, fast = _model_row(model, label, prompts, space, steps, warmup, compile)
    result.rows.append(row)
    if fast.device.type == "cuda":
        import torch

        result.cuda = throughput_lines(fast, prompts, space, steps, warmup, torch.cuda.get_device_name(fast.device))
    del fast
    narrow = overhead_model(model)
    for name, chosen in ((f"width 64, {layers} layers", prompts),
                         (f"width 64, {layers} layers, prompts cut to {OVERHEAD_PROMPT} tokens",
                          [prompt[:OVERHEAD_PROMPT] for prompt in prompts])):
        result.rows.append(_model_row(narrow, name, chosen, space, steps, warmup, compile)[0])
    return result
