"""Benchmarks that print ratios measured in one run (``arc-kit bench``); never tests.

- decode: the cost of one explored DFS token against one token of transformers' greedy
  ``generate`` on the same model and prompts (prompt prefill subtracted from both; goal <= 1.1x);
  on a GPU whose bandwidth is on record (``expectations.GPUS``), also against the memory-bandwidth floor
  (``decode_floor_seconds``: every weight and every cached key and value read once per step);
- search: DFS at T = 9% against greedy for whole test inputs under the same augmentations;
- scoring: the engine's prefix-reusing scoring (``Engine.score``: one prompt pass, its keys and values
  copied into the answers' lanes) against one full forward pass per answer (goal >= 5x);
- engine (``engine_bench``) and, only when asked for, drafts (``drafts_bench``), each ending with its line.
Every NLL is measured as the solver measures it (``probabilities``), every search and scoring runs on
the decode engine, the baselines (``generate``, one forward per answer) on the model itself. Each
figure is the median of its repeats; the machine, versions and settings are printed with it.
"""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from arc_kit.data.augmentation import Augmentation
from arc_kit.data.tasks import Task
from arc_kit.experiments.drafts_bench import bench_drafts
from arc_kit.experiments.engine_bench import bench_engine, synchronize
from arc_kit.method.answers import AnswerSpace
from arc_kit.method.engine import make_engine
from arc_kit.method.search import search
from arc_kit.method.solver import Solver
from arc_kit.method.transformers_forward import sequence_nll
from arc_kit.model.loading import LoadSettings, create_model, load_model
from arc_kit.run.expectations import decode_floor_seconds, device_bandwidth, kv_bytes_per_token, parameter_bytes
from arc_kit.run.planner import shortest_tasks
from arc_kit.settings import SamplerSettings, SolveSettings
from arc_kit.text import TaskEncoder, Vocabulary


@dataclass
class BenchResult:
    name: str
    ours: float  # seconds (or seconds per token)
    reference: float
    unit: str
    note: str = ""

    @property
    def ratio(self) -> float:
        return self.ours / self.reference if self.reference else float("nan")

    def line(self) -> str:
        return (f"{self.name:<34} ours {self.ours * 1e3:9.2f} ms{self.unit}  reference {self.reference * 1e3:9.2f} "
                f"ms{self.unit}  ratio {self.ratio:6.2f}x  {self.note}")


def _timed(model, function, repeats: int) -> tuple[float, object]:
    device, times, result = next(model.parameters()).device, [], None
    for _ in range(repeats):
        synchronize(device)
        started = time.perf_counter()
        result = function()
        synchronize(device)
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def _prefill_seconds(model, ids: Sequence[int], repeats: int) -> float:
    """Seconds of one forward of ``ids`` (transformers, no cache kept): what ``generate`` spends first."""
    import torch

    tensor = torch.tensor([list(map(int, ids))], device=next(model.parameters()).device)

    def run():
        with torch.no_grad():
            return model(input_ids=tensor, use_cache=True)
    return _timed(model, run, repeats)[0]


def _engine_prefill_seconds(engine, ids: Sequence[int], space: AnswerSpace, repeats: int) -> float:
    """Seconds of the engine's first pass of ``ids`` (what a DFS spends before its first step)."""
    def run():
        engine.start(1, len(ids) + space.max_length, space)
        try:
            return engine.prefill(0, list(map(int, ids)), len(ids))
        finally:
            engine.release()
    return _timed(engine.model, run, repeats)[0]


DEFAULTS = SolveSettings()  # the solver's defaults: each benchmark measures what a run does
PROBABILITIES = DEFAULTS.probabilities
THRESHOLD = DEFAULTS.sampler.threshold


def bench_decode(model, encoder: TaskEncoder, tasks: Sequence[Task], *, threshold: float = THRESHOLD,
                 greedy_tokens: int = 64, repeats: int = 3, probabilities: str = PROBABILITIES) -> BenchResult:
    """Seconds per explored token: DFS (on the engine) against greedy ``generate``, prefill subtracted from both."""
    import torch

    space, decoder = AnswerSpace.from_encoder(encoder, probabilities), make_engine(model)
    device = next(model.parameters()).device
    settings = SamplerSettings(threshold=threshold)
    dfs_per_token, greedy_per_token, prompt_lengths = [], [], []
    for task in tasks:
        prompt = encoder.encode_prompt(task.train, task.test[0].input).ids
        prompt_lengths.append(len(prompt))
        tensor = torch.tensor([list(map(int, prompt))], device=device)
        prefill = _prefill_seconds(model, prompt, repeats)
        engine_prefill = _engine_prefill_seconds(decoder, prompt, space, repeats)
        seconds, result = _timed(model, lambda: search(decoder, [prompt], space, settings)[0], repeats)
        if result.forward_calls:
            dfs_per_token.append((seconds - engine_prefill) / result.forward_calls)

        def greedy():
            with torch.no_grad():
                return model.generate(tensor, max_new_tokens=greedy_tokens, min_new_tokens=greedy_tokens,
                                      do_sample=False, pad_token_id=space.eos_id, eos_token_id=space.eos_id)
        seconds, _ = _timed(model, greedy, repeats)
        greedy_per_token.append((seconds - prefill) / (greedy_tokens - 1))
    note = f"{len(dfs_per_token)} prompts, T={threshold:g}, greedy {greedy_tokens} tokens, on the {decoder.kind}"
    if device.type == "cuda" and dfs_per_token:
        note += "; " + floor_note(model, prompt_lengths, statistics.median(dfs_per_token),
                                  torch.cuda.get_device_name(device))
    return BenchResult("decode: DFS token vs generate token", statistics.median(dfs_per_token),
                       statistics.median(greedy_per_token), "/token", note)


def floor_note(model, prompt_lengths: Sequence[int], seconds_per_token: float, device_name: str) -> str:
    """The decode benchmark's words on the bandwidth floor of a one-token step after the median prompt."""
    bandwidth = device_bandwidth(device_name)
    if bandwidth is None:
        return f"bandwidth floor unknown: no bandwidth on record for {device_name}"
    element_bytes = next(model.parameters()).element_size()
    floor = decode_floor_seconds(parameter_bytes(model), int(statistics.median(prompt_lengths)),
                                 kv_bytes_per_token(model.config, element_bytes), bandwidth)
    return (f"bandwidth floor {floor * 1e3:.3f} ms/token at {bandwidth / 1e9:.0f} GB/s ({device_name}): "
            f"DFS token {seconds_per_token / floor:.1f}x the floor")


def bench_search(model, encoder: TaskEncoder, tasks: Sequence[Task], *, threshold: float = THRESHOLD,
                 augmentations: int = 4, seed: int = 0, probabilities: str = PROBABILITIES) -> BenchResult:
    """Whole test inputs under the same augmentations (as the solver runs them): DFS against greedy."""
    solver = Solver(model, encoder, SolveSettings(test_time_training=False, probabilities=probabilities))
    totals = {}
    for name, sampler in (("dfs", SamplerSettings("dfs", threshold=threshold)), ("greedy", SamplerSettings("greedy"))):
        started = time.perf_counter()
        for task in tasks:
            views = Augmentation.inference_set(np.random.default_rng(seed), len(task.train), augmentations)
            solver.sample(model, task.train, task.test[0].input, views, sampler)
        synchronize(next(model.parameters()).device)
        totals[name] = time.perf_counter() - started
    return BenchResult(f"search: DFS T={threshold * 100:g}% vs greedy", totals["dfs"], totals["greedy"], "",
                       f"{len(tasks)} tasks x {augmentations} augmentations, whole test inputs")


def bench_scoring(model, encoder: TaskEncoder, tasks: Sequence[Task], *, candidates: int = 16, repeats: int = 3,
                  seed: int = 0, probabilities: str = PROBABILITIES) -> BenchResult:
    """Prefix-reusing batched scoring (on the engine) against one full forward per answer, same answers."""
    space, decoder = AnswerSpace.from_encoder(encoder, probabilities), make_engine(model)
    rng = np.random.default_rng(seed)
    ours = reference = 0.0
    for task in tasks:
        prompt = encoder.encode_prompt(task.train, task.test[0].input).ids
        answers = []
        for _ in range(candidates):  # the right answer with a few random cells changed
            grid = np.array(task.test[0].output)
            cells = rng.integers(0, grid.size, size=int(rng.integers(0, 4)))
            grid.flat[cells] = rng.integers(0, 10, size=len(cells))
            answers.append(encoder.encode_answer(grid))
        ours += _timed(model, lambda: decoder.score([prompt], [answers], space), repeats)[0]
        reference += _timed(model, lambda: sequence_nll(model, prompt, answers, space), repeats)[0]
    return BenchResult("scoring: prefix-reusing vs per answer", ours, reference, "",
                       f"{len(tasks)} prompts x {candidates} answers")


def environment() -> str:
    import torch
    import transformers

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU ({torch.get_num_threads()} threads)"
    return (f"{platform.node()} | {device} | torch {torch.__version__} | transformers {transformers.__version__} | "
            f"{time.strftime('%Y-%m-%d %H:%M')}")


def llama_3b_shaped(device: str = "cuda"):
    """A Llama-3.2-3B-shaped model in bf16 with random weights and the 64-symbol vocabulary, for per-token costs."""
    import torch

    model, _ = create_model("micro", hidden_size=3072, intermediate_size=8192, num_hidden_layers=28,
                            num_attention_heads=24, num_key_value_heads=8, head_dim=128)
    return model.to(device=device, dtype=torch.bfloat16).eval()


BENCHMARKS = {"decode": bench_decode, "search": bench_search, "scoring": bench_scoring, "engine": bench_engine,
              "drafts": bench_drafts}
DEFAULT_BENCHMARKS = tuple(name for name in BENCHMARKS if name != "drafts")  # the engine's last: its line ends them
DRAFT_BENCH_TASKS = 30  # the drafts benchmark's tasks: the shortest by prompt tokens


def run_benchmarks(model_path: str | None, tasks, *, which: Sequence[str] = DEFAULT_BENCHMARKS,
                   count: int | None = None, max_prompt: int = 4096, threshold: float = THRESHOLD,
                   device: str = "auto", probabilities: str = PROBABILITIES, engine_compile: str = "auto",
                   augmentations: int = DEFAULTS.inference_augmentations,
                   draft_tokens: int = DEFAULTS.sampler.draft_tokens):
    """Lines to print: the environment, then the lines of each benchmark in ``which`` (all but drafts by default).

    ``model_path`` None benchmarks a random Llama-3.2-3B-shaped model (GPU); otherwise that folder.
    ``tasks`` (a TaskSet) gives the first ``count`` (5 unless given) tasks by id whose prompts fit
    ``max_prompt`` tokens; the drafts benchmark takes the ``count`` (30 unless given) with the fewest
    prompt tokens (``planner.shortest_tasks``), each test input under ``augmentations`` views, at most
    ``draft_tokens`` fed with a branch's token.
    ``engine_compile``: the engine benchmark compiles the engine's step as it says.
    """
    if model_path is None:
        model, encoder, label = llama_3b_shaped(), TaskEncoder(Vocabulary()), "Llama-3.2-3B-shaped, random"
    else:
        loaded = load_model(model_path, LoadSettings(device=device))
        model, encoder, label = loaded.model, loaded.encoder(), model_path
    chosen = [task for task in tasks.tasks()
              if len(encoder.encode_prompt(task.train, task.test[0].input, max_len=10**6)) <= max_prompt]
    chosen = sorted(chosen, key=lambda task: task.id)[:count or 5]
    if not chosen and any(name != "drafts" for name in which):
        raise ValueError(f"--max-prompt {max_prompt} leaves no task of the {len(tasks)} to run: no prompt is that "
                         "short; give a larger --max-prompt")
    yield f"{environment()} | model {label}"
    options = {"decode": {"threshold": threshold}, "search": {"threshold": threshold}, "scoring": {},
               "engine": {"label": label, "compile": engine_compile},
               "drafts": {"threshold": threshold, "augmentations": augmentations, "draft_tokens": draft_tokens}}
    for name in which:
        picked = chosen if name != "drafts" else \
            list(shortest_tasks(tasks, encoder, count or DRAFT_BENCH_TASKS).tasks())
        result = BENCHMARKS[name](model, encoder, picked, **options[name], probabilities=probabilities)
        yield from result.lines() if hasattr(result, "lines") else [result.line()]
