"""The ``arc-kit bench`` command: benchmarks that print ratios (DFS vs greedy decoding, prefix-reusing scoring,
the decode engine against transformers' forward, the speculative DFS's drafts).

It parses and prints the lines ``experiments.bench`` yields; it knows nothing of how each benchmark measures.
"""

from __future__ import annotations

from arc_kit.cli.options import (
    MAX_COUNT,
    MAX_TOKENS,
    command,
    device_argument,
    load_given_tasks,
    model_path,
    number_argument,
    option_bounds,
    tasks_argument,
)
from arc_kit.settings import ENGINE_COMPILE_MODES, SamplerSettings, SolveSettings


@command("bench", "benchmarks that print ratios: DFS vs greedy decoding, prefix-reusing scoring, the decode engine")
def setup_bench(parser):
    parser.add_argument("--model", help="model folder (default: the shipped model)")
    parser.add_argument("--llama-3b-shaped", action="store_true",
                        help="a Llama-3.2-3B-shaped random model (bf16, GPU) instead of --model, for per-token costs")
    tasks_argument(parser)
    number_argument(parser, "--tasks", int, "the first N tasks by id (default: 5); --which drafts: the N shortest by "
                    "prompt tokens (default: 30)", at_least=1, at_most=MAX_COUNT, default=None)
    number_argument(parser, "--max-prompt", int, "skip tasks whose prompt is longer than this many tokens (default: "
                    "%(default)s)", at_least=1, at_most=MAX_TOKENS, default=4096)
    from arc_kit.experiments.bench import BENCHMARKS, DEFAULT_BENCHMARKS

    parser.add_argument("--which", nargs="*", default=list(DEFAULT_BENCHMARKS), choices=list(BENCHMARKS),
                        help="benchmarks to run (default: all but drafts)")
    number_argument(parser, "--threshold", float, "DFS: minimum probability of a returned answer (default: "
                    "%(default)s)", bounds=option_bounds(SamplerSettings, "threshold"),
                    default=SamplerSettings().threshold)
    device_argument(parser)
    number_argument(parser, "--augmentations", int, "--which drafts: inference augmentations per test input (default: "
                    "%(default)s)", at_least=1, at_most=1024, default=SolveSettings().inference_augmentations)
    number_argument(parser, "--draft-tokens", int, "--which drafts: the most draft tokens fed with a branch's token in "
                    "one step (default: %(default)s)", at_least=0, at_most=64,
                    default=SolveSettings().sampler.draft_tokens)
    parser.add_argument("--engine-compile", choices=ENGINE_COMPILE_MODES, default=SolveSettings().engine_compile,
                        help="--which engine: compile the engine's step (default: %(default)s: on a GPU only)")

    def run(args):
        from arc_kit.experiments import bench

        model = None if args.llama_3b_shaped else str(model_path(args))
        for line in bench.run_benchmarks(model, load_given_tasks(args),
                                         which=args.which, count=args.tasks, max_prompt=args.max_prompt,
                                         threshold=args.threshold, device=args.device,
                                         engine_compile=args.engine_compile, augmentations=args.augmentations,
                                         draft_tokens=args.draft_tokens):
            print(line, flush=True)
        return 0
    return run
