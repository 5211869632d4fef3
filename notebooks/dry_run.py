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
# # Dry run against a public evaluation set
#
# The competition pipeline (test-time training, DFS under augmentations, product-of-experts
# selection) on tasks whose answers are known, with a named preset of settings: the score, a per-task table, the attempts, how the
# product of experts moved the right answer up, and what other DFS thresholds would have given.
# Set `ARC_KIT_SMOKE=1` to run a small version in a minute or two on a CPU.

# %%
import os

from IPython.display import display

SMOKE = os.environ.get("ARC_KIT_SMOKE") == "1"  # CI: a small run in a temporary folder
MODEL = None  # None: the model the kit ships (kaggle_dataset/model)
DATASET = "arc-agi-1/evaluation"
PRESET = "dry-run"  # named settings (arc_kit.settings.SOLVE_PRESETS): "dry-run" is `make dry-run`, "paper" the paper's
TASKS = 2 if SMOKE else 5  # how many tasks; 0 for all
PICK = "shortest"  # "shortest" by prompt tokens (as `make dry-run`), or "first" by id
OUT = None  # records, submission, scores, report; None: the clone's runs/dry-run-notebook (smoke: a temporary folder)
RESTART = False  # True: discard earlier results in OUT (needed after changing the settings)

# %%
import tempfile
from pathlib import Path

import arc_kit
from arc_kit.experiments.analysis import rank_table, threshold_curve
from arc_kit.model.loading import default_model_path, load_model
from arc_kit.run.planner import shortest_tasks
from arc_kit.data.pictures import task_picture
from arc_kit.data.plotting import draw_rank_improvement, draw_threshold_curve
from arc_kit.run.report import write_report
from arc_kit.run.jobs import solve
from arc_kit.settings import smoke, solve_preset
from arc_kit.method.solver import Solver

if SMOKE:
    OUT = tempfile.mkdtemp(prefix="arc-kit-dry-run-")
elif OUT is None:  # the clone's runs/ folder wherever the notebook runs from (the kit is installed from the clone)
    OUT = Path(arc_kit.__file__).resolve().parents[1] / "runs" / "dry-run-notebook"
settings = smoke(solve_preset(PRESET)) if SMOKE else solve_preset(PRESET)
model = load_model(MODEL or default_model_path())
solver = Solver.from_loaded(model, settings)
tasks = arc_kit.load_tasks(DATASET)
if TASKS:
    tasks = shortest_tasks(tasks, solver.encoder, TASKS) if PICK == "shortest" else tasks.head(TASKS)
print(f"{len(tasks)} tasks: {', '.join(tasks.ids)}; {solver.settings.description}")
run = solve(tasks, solver, OUT, restart=RESTART)
print(run.score)
print(f"wrote {write_report(OUT, tasks=tasks)}: every task of the run, to read in a browser")

# %%
import pandas as pd

table = pd.read_csv(f"{OUT}/scores.csv", dtype={"task_id": str})
table

# %% [markdown]
# ## Tasks and their attempts
# In the run's order (the table's); each attempt ticked (green) or crossed (red) against the known output,
# "no answer" where the model gave none.

# %%
for task_id in list(run.records)[:3 if SMOKE else 6]:
    display(task_picture(tasks[task_id], run.records[task_id].attempts))

# %% [markdown]
# ## Rank of the right answer before and after the product of experts
# (the paper's rank-improvement figure; only test outputs whose right answer was among the candidates)

# %%
ranks = rank_table(run.records, tasks)
print(f"right answer among the candidates for {len(ranks)} of {run.score.total} test outputs")
if len(ranks):
    figure = draw_rank_improvement(ranks)  # drawn once, as the cell ends (not again as its value)

# %% [markdown]
# ## Solved share against the DFS threshold
# Exact for thresholds at or above the run's: DFS at T returns every answer above T.

# %%
threshold = solver.settings.sampler.threshold
thresholds = [t for t in sorted({threshold, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.8}) if t >= threshold]
curve = threshold_curve(run.records, tasks, thresholds)
figure = draw_threshold_curve(curve, threshold)
curve
