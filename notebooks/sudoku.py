# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Sudoku with arc_kit (paper, section 5.5)
#
# Puzzles from the kit's seeded generator (every one checked to have a unique solution), the
# augmentations that keep a Sudoku a Sudoku, the text a model reads, and what DFS + the product of
# experts propose for one puzzle. Uses the model trained by `arc-kit sudoku train` when
# `MODEL` exists, else a fresh (untrained) micro model, so the candidates then are noise.

# %%
import os

MODEL = "../runs/sudoku/model"  # a folder written by `arc-kit sudoku train`; missing: an untrained micro model
SEED = 0
CLUES = "sudoku-3m"  # Sudoku 3M's clue histogram (22-27 nearly all); or a range such as "40-55" for easy ones
SMOKE = os.environ.get("ARC_KIT_SMOKE") == "1"

# %%
import numpy as np

from IPython.display import display

from arc_kit import picture, sudoku

puzzles = sudoku.generate_puzzles(4, seed=SEED, clues=sudoku.parse_clues(CLUES))
display(picture([grid for pair in puzzles for grid in (pair.input, pair.output)],
                [f"{sudoku.clue_count(pair.input)} clues" if i % 2 == 0 else "solution"
                 for pair in puzzles for i in range(2)], title="puzzles (0 = empty, black) and their solutions"))
print([sudoku.count_solutions(pair.input) for pair in puzzles], "solutions each")

# %% [markdown]
# ## Augmentations
# Digits permuted with 0 kept, an optional transposition, bands and rows within a band, stacks and
# columns within a stack. Each has a key (`t1-d...-r...-c...`) and inverts exactly.

# %%
pair = puzzles[0]
views = sudoku.SudokuAugmentation.inference_set(np.random.default_rng(SEED), 8)
display(picture([view.apply_grid(pair.input) for view in views], [view.key for view in views],
                title="one puzzle under the 8 views"))
assert all(sudoku.solves(view.apply_grid(pair.input), view.apply_grid(pair.output)) for view in views)
assert all(np.array_equal(view.invert_grid(view.apply_grid(pair.output)), pair.output) for view in views)
for view in views[:3]:
    print(view.key)

# %% [markdown]
# ## The text a model reads
# One puzzle per sequence: the pre-prompt, `I` + the puzzle's rows + `\n+/-=O`, then the solution
# (the only part in the loss).

# %%
from arc_kit.settings import TrainingSettings, sudoku_training
from arc_kit.text import TaskEncoder, Vocabulary
from arc_kit.model.training_data import sample_sequence

encoder = TaskEncoder(Vocabulary())
training = sudoku_training(TrainingSettings())  # what `arc-kit sudoku train` trains with
encoded = sample_sequence(sudoku.SudokuPool(puzzles), np.random.default_rng(SEED), encoder, training.sequences,
                          mask_first_output=training.lora.mask_first_output)
print(encoder.text(encoded.ids))
print(f"{len(encoded)} tokens, {int(encoded.loss_mask.sum())} of them in the loss")

# %% [markdown]
# ## Candidates and their product-of-experts scores
# DFS at T under each view, answers mapped back and merged, each candidate scored under 8 fresh
# views; the lowest summed NLL is the one attempt.

# %%
from pathlib import Path

from arc_kit.model.loading import create_model, load_model
from arc_kit.method.solver import Solver
from arc_kit.settings import LoadSettings, SudokuEvalSettings
from arc_kit.sudoku.experiment import solve_puzzle
from arc_kit.text import HuggingFaceTokenizer

if Path(MODEL).exists() and not SMOKE:
    loaded = load_model(MODEL, LoadSettings(device="cpu", dtype="float32"))
    model, model_encoder = loaded.model, loaded.encoder()
else:
    model, tokenizer = create_model("micro", seed=SEED)
    model_encoder = TaskEncoder(HuggingFaceTokenizer(tokenizer))
settings = SudokuEvalSettings().replace(**(dict(threshold=0.3, inference_augmentations=2, scoring_augmentations=2,
                                               max_forward_calls=100) if SMOKE else dict(max_forward_calls=3000)))
solver = Solver(model.eval(), model_encoder, settings.solve)
record = solve_puzzle(solver, "notebook", pair.input, settings)
test = record.tests[0]
answer = test.attempts[0] if test.attempts else None
print(f"{len(test.candidates)} candidates, {test.search.forward_calls} forward calls, "
      f"{record.timings['total']:.1f} s; solved: {sudoku.score_answer(pair.input, answer)}")
for candidate in test.candidates[:8]:
    print(f"generation NLL {candidate.best_generation_nll:6.2f}  PoE {candidate.aggregate('product'):7.2f}  "
          f"valid {sudoku.is_valid_solution(candidate.grid)}  right {np.array_equal(candidate.grid, pair.output)}")
if test.candidates:
    shown = test.candidates[:8]
    display(picture([c.grid for c in shown], [f"PoE {c.aggregate('product'):.1f}" for c in shown],
                    highlight=[np.array_equal(c.grid, pair.output) for c in shown],
                    title="candidates (green: the solution)"))

# %% [markdown]
# ## The CPU run (docs/sudoku)
# What `docs/sudoku/train.sh` and `evaluate.sh` measured: the metrics and the paper's Sudoku figure
# (share of puzzles whose solution DFS generated, and that each rule selected, against T).

# %%
import json

import pandas as pd

from arc_kit.sudoku.experiment import draw_sudoku_curve

RUN = Path("../docs/sudoku/metrics.json")
if RUN.exists():
    run = json.loads(RUN.read_text())
    print({name: value for name, value in run["metrics"].items() if name != "by_clues"})
    # the run's threshold (docs/sudoku's runs wrote an earlier layout, whose fields read as the defaults: 1%, as run)
    threshold = SudokuEvalSettings.from_json(run["run"]["settings"]).solve.sampler.threshold
    draw_sudoku_curve(pd.DataFrame(run["curve"]), threshold, "docs/sudoku: the CPU run")
