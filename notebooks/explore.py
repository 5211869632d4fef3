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
# # Exploring ARC tasks, and the model at work on one
#
# Load a task set, look at tasks, see one task under the augmentations the method uses, read the
# text a model is given; then watch the model solve one task: a short test-time training, the
# candidates the depth-first search finds, how sure the model was of each token of the best one, the
# candidates' probabilities under each augmentation (the product of experts), and the answer the
# kit would submit. Tasks, grids, augmentations and records draw themselves; change the settings
# and rerun. The whole notebook takes about 92 s of one core's time (docs/results.md).

# %%
DATASET = "arc-agi-1/evaluation"  # or arc-agi-1/training, arc-agi-2/evaluation, a challenges JSON, a folder
TASK_ID = "00576224"
SEED = 0  # augmentations are drawn from this seed
PRESET = "explore"  # the method's settings (arc_kit.settings.SOLVE_PRESETS): "explore" is one task on a CPU

# %%
import numpy as np
from IPython.display import display

import arc_kit
from arc_kit.data.pictures import picture

tasks = arc_kit.load_tasks(DATASET)  # a set's name, a challenges file or a folder (load_dataset: names only)
tasks

# %% [markdown]
# ## A few tasks
# Each grid is captioned with its size (height x width); a cell has one size across a picture.

# %%
for task in tasks.head(2).tasks():
    display(task)

# %% [markdown]
# ## One task under the paper's augmentations
# An augmentation is a symmetry of the square, a colour permutation and an order of the train pairs;
# its key (`s5-c...-o...`) is how records write it, its `name` says it in words.

# %%
task = tasks[TASK_ID]
augmentations = arc_kit.Augmentation.inference_set(np.random.default_rng(SEED), len(task.train), count=2)
for augmentation in augmentations:
    display(augmentation, augmentation.apply(task))

# %% [markdown]
# The test input under all 16 inference augmentations (each symmetry twice, fresh colours each
# time), and each answer mapped back to the original frame (they must all agree):

# %%
full_set = arc_kit.Augmentation.inference_set(np.random.default_rng(SEED), len(task.train))
back = [a.invert_grid(a.apply_grid(task.test[0].output)) for a in full_set]
assert all(np.array_equal(grid, task.test[0].output) for grid in back)
picture([a.apply_grid(task.test[0].input) for a in full_set], [a.name.replace(", ", "\n") for a in full_set],
        title="the test input, 16 views")

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
# ## The model at work on the task
# The model the kit ships, with a CPU-sized preset: test-time training on the task's own pairs,
# the depth-first search under a few augmentations (every answer above its threshold), then every
# candidate scored under fresh augmentations; the two best by the product of experts are the attempts.
# `solve_task` never sees the test output; it only says afterwards whether an attempt was right.

# %%
import os
import time

from arc_kit.method.solver import Solver
from arc_kit.model.loading import default_model_path, load_model
from arc_kit.settings import smoke, solve_preset

settings = solve_preset(PRESET)
if os.environ.get("ARC_KIT_SMOKE") == "1":  # CI: a quicker version of the same steps
    settings = smoke(settings)
print(f"{PRESET}: {settings.description}")
solver = Solver.from_loaded(load_model(default_model_path()), settings)
started = time.monotonic()
record = solver.solve_task(task)
print(f"solved in {time.monotonic() - started:.0f} s; {record!r}")

# %% [markdown]
# ### The candidates the search found, and their probabilities under each augmentation
# Best first by the product of experts, shown as the geometric mean of a candidate's probabilities
# over the scoring views (the product of its probabilities is that mean to the power of the views:
# the ranking is the same). "generated" is its probability where the search found it. Hover over a
# cell for its NLL. The attempts are marked, ticked or crossed against the known output.

# %%
from arc_kit.method.record_view import show_record

test = record.tests[0]
print(f"found {len(test.candidates)} candidates for test 0 ({test.search.answers} answers, "
      f"{test.search.not_grids} not grids)")
show_record(record, task)  # `record` alone draws itself too, without the task's grids

# %% [markdown]
# ### What the kit would submit

# %%
for number, attempt in enumerate(test.attempts, 1):
    right = np.array_equal(attempt, task.test[0].output)
    print(f"attempt {number}: a {attempt.shape[0]}x{attempt.shape[1]} grid, {'right' if right else 'wrong'}")
print(f"record.correct = {record.correct} (per test output: one of the attempts is right)")

# %% [markdown]
# ### The model's own text for the best candidate, token by token
# Fed under the augmentation where it was most probable, after the trained adapter: each token
# shaded by how unsure the model was of it (hover for its probability and the likeliest other token).

# %%
from arc_kit.method.answer_tokens import answer_tokens
from arc_kit.method.record_view import ranked_candidates

best = ranked_candidates(test)[0]
view = arc_kit.Augmentation.from_key(min(best.generation_nlls, key=best.generation_nlls.get))
prompt = solver.encoder.encode_prompt(view.apply_pairs(task.train), view.apply_grid(task.test[0].input),
                                      max_len=solver.settings.max_len)
tokens = answer_tokens(solver.engine(), solver.encoder, prompt.ids,
                       solver.encoder.encode_answer(view.apply_grid(best.grid)), solver.space)
print(f"under {view.name}: NLL {tokens.nll:.3f} here, {best.generation_nlls[view.key]:.3f} in the search")
tokens

# %%
tokens.table().head(12)

# %% [markdown]
# A whole run has a report of the same pictures for every task: `arc-kit report RUN` (the dry run and
# `arc-kit solve` write `report.html` beside their `submission.json`).
