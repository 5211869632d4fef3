# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Dry run against a public evaluation set
#
# The competition pipeline (test-time training, DFS under 16 augmentations, product-of-experts
# selection) on tasks whose answers are known: the score, a per-task table, the attempts, how the
# product of experts moved the right answer up, and what other DFS thresholds would have given.
# Set `ARC_KIT_SMOKE=1` to run a small version in a minute or two on a CPU.

# %%
import os

SMOKE = os.environ.get("ARC_KIT_SMOKE") == "1"  # CI: a small run in a temporary folder
MODEL = None  # None: the model the kit ships (kaggle_dataset/model)
DATASET = "arc-agi-1/evaluation"
TASKS = 2 if SMOKE else 20  # the first N tasks by id; 0 for all
OUT = "../runs/dry-run-notebook"  # records, submission and scores (a temporary folder in smoke mode)
THRESHOLD = 0.09  # DFS: minimum probability of a candidate
AUGMENTATIONS = 2 if SMOKE else 16
SCORING_AUGMENTATIONS = 2 if SMOKE else 16
TTT_STEPS = 2 if SMOKE else 64
MAX_LEN = 2048 if SMOKE else 8192
MAX_FORWARD_CALLS = 500 if SMOKE else 20_000  # DFS: cap on single-token calls per search
RESTART = False  # True: discard earlier results in OUT (needed after changing the settings)

# %%
import tempfile

import arc_kit
from arc_kit.analysis import rank_table, threshold_curve
from arc_kit.models import default_model_path, load_model
from arc_kit.plotting import draw_rank_improvement, draw_task, draw_threshold_curve
from arc_kit.run import solve
from arc_kit.settings import SamplerSettings, SolveSettings, TestTimeSettings
from arc_kit.solver import Solver

if SMOKE:
    OUT = tempfile.mkdtemp(prefix="arc-kit-dry-run-")
sampler = SamplerSettings("dfs", threshold=THRESHOLD, max_forward_calls=MAX_FORWARD_CALLS)
settings = SolveSettings(sampler=sampler, inference_augmentations=AUGMENTATIONS,
                         scoring_augmentations=SCORING_AUGMENTATIONS, ttt=TestTimeSettings(steps=TTT_STEPS),
                         max_len=MAX_LEN)
tasks = arc_kit.load_tasks(DATASET)
tasks = tasks.head(TASKS) if TASKS else tasks
model = load_model(MODEL or default_model_path())
solver = Solver.from_loaded(model, settings)
run = solve(tasks, solver, OUT, restart=RESTART)
print(run.score)

# %%
import pandas as pd

table = pd.read_csv(f"{OUT}/scores.csv", dtype={"task_id": str})
table

# %% [markdown]
# ## Tasks and their attempts
# Green titles are right answers.

# %%
for task in tasks.head(3 if SMOKE else 6).tasks():
    draw_task(task, run.records[task.id].attempts or None)

# %% [markdown]
# ## Rank of the right answer before and after the product of experts
# (the paper's rank-improvement figure; only test outputs whose right answer was among the candidates)

# %%
ranks = rank_table(run.records, tasks)
print(f"right answer among the candidates for {len(ranks)} of {run.score.total} test outputs")
if len(ranks):
    draw_rank_improvement(ranks)

# %% [markdown]
# ## Solved share against the DFS threshold
# Exact for thresholds at or above the run's: DFS at T returns every answer above T.

# %%
thresholds = sorted({THRESHOLD, 0.1, 0.15, 0.2, 0.3, 0.5, 0.8})
thresholds = [t for t in thresholds if t >= THRESHOLD]
curve = threshold_curve(run.records, tasks, thresholds)
draw_threshold_curve(curve, THRESHOLD)
curve
