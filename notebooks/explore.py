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
# # Exploring ARC tasks with arc_kit
#
# Load a task set, look at tasks, see one task under the augmentations the method uses, and read
# the text a model is given. Every cell calls the package; change the settings and rerun.

# %%
DATASET = "arc-agi-1/evaluation"  # or arc-agi-1/training, arc-agi-2/evaluation, a challenges JSON, a folder
TASK_ID = "00576224"
SEED = 0  # augmentations are drawn from this seed

# %%
import numpy as np

import arc_kit
from arc_kit.data.plotting import draw_grids, draw_task

tasks = arc_kit.load_tasks(DATASET)
tasks

# %% [markdown]
# ## A few tasks

# %%
for task in tasks.head(3).tasks():
    draw_task(task)

# %% [markdown]
# ## One task under the paper's augmentations
# Each augmentation is a symmetry of the square, a colour permutation and an order of the train
# pairs; its key (`s5-c...-o...`) is how it is written in records.

# %%
task = tasks[TASK_ID]
augmentations = arc_kit.Augmentation.inference_set(np.random.default_rng(SEED), len(task.train), count=4)
for augmentation in augmentations:
    draw_task(augmentation.apply(task), title=f"{task.id} under {augmentation.key}")

# %% [markdown]
# The test input under all 16 inference augmentations, and each answer mapped back to the
# original frame (they must all agree):

# %%
full_set = arc_kit.Augmentation.inference_set(np.random.default_rng(SEED), len(task.train))
views = [a.apply_grid(task.test[0].input) for a in full_set]
draw_grids(views, [a.key[:2] for a in full_set], title="the test input, 16 views")
back = [a.invert_grid(a.apply_grid(task.test[0].output)) for a in full_set]
assert all(np.array_equal(grid, task.test[0].output) for grid in back)

# %% [markdown]
# ## The text a model reads
# The authors' format: pre-prompt, then `I` + input rows + `\n+/-=O` + output rows + `\n` + eos
# for each pair. The loss covers output tokens only (and not the first output).

# %%
encoder = arc_kit.TaskEncoder(arc_kit.Vocabulary())
encoded = encoder.encode_training(list(task.train) + [task.test[0]])
print(encoder.text(encoded.ids))
print(f"{len(encoded)} tokens, {int(encoded.loss_mask.sum())} of them in the loss")

# %%
prompt = encoder.encode_prompt(task.train, task.test[0].input)
print(f"generation prompt: {len(prompt)} tokens; room kept for an answer of up to "
      f"{encoder.max_answer_len} tokens")
print(encoder.text(prompt.ids[-40:]))

# %% [markdown]
# ## What the model proposes: DFS candidates and their scores
# DFS returns every answer above a probability threshold under one augmentation; the product of
# experts then scores each candidate under several fresh augmentations. Uses the model the kit ships.

# %%
import os

from arc_kit.method.answers import AnswerSpace
from arc_kit.method.engine import make_engine
from arc_kit.method.search import search
from arc_kit.settings import SamplerSettings
from arc_kit.model.loading import default_model_path, load_model
from arc_kit.data.plotting import draw_nll_heatmap
from arc_kit.method.experts import product_of_probabilities
from arc_kit.method.solver import augmented_nlls

THRESHOLD = 0.01  # low, to see several candidates
SMOKE = os.environ.get("ARC_KIT_SMOKE") == "1"
loaded = load_model(default_model_path())
engine = make_engine(loaded.model)
model_encoder = loaded.encoder(max_len=2048 if SMOKE else loaded.token_budget())
view = full_set[0]
prompt = model_encoder.encode_prompt(view.apply_pairs(task.train), view.apply_grid(task.test[0].input))
found = search(engine, [prompt.ids], AnswerSpace.from_encoder(model_encoder),
               SamplerSettings(threshold=THRESHOLD, max_forward_calls=300 if SMOKE else 5000))[0]
candidates = []
for completion in found.completions:
    try:
        candidates.append((view.invert_grid(model_encoder.decode_answer(completion.ids)), float(np.exp(-completion.nll))))
    except ValueError:
        pass  # not a grid
print(f"{len(found.completions)} answers above {THRESHOLD:.0%}, {len(candidates)} of them grids, "
      f"{found.forward_calls} forward calls")
if candidates:
    draw_grids([grid for grid, _ in candidates], [f"p={p:.1%}" for _, p in candidates],
               highlight=[np.array_equal(grid, task.test[0].output) for grid, _ in candidates],
               title="DFS candidates (green: the right answer)")

# %%
scoring_set = arc_kit.Augmentation.inference_set(np.random.default_rng(SEED + 1), len(task.train), 8)
grids = [grid for grid, _ in candidates] + [task.test[0].output]  # the right answer too, for comparison
nlls = augmented_nlls(engine, model_encoder, task.train, task.test[0].input, grids, scoring_set,
                      AnswerSpace.from_encoder(model_encoder))
labels = [f"candidate {i} (PoE {product_of_probabilities(row):.1f})" for i, row in enumerate(nlls[:-1])]
draw_nll_heatmap(nlls, [a.key for a in scoring_set], labels + [f"right answer (PoE {nlls[-1].sum():.1f})"])
