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
# # Initial fine-tuning
#
# Train a model on RE-ARC (the paper's data; here with the ARC-AGI-1 training tasks mixed in, as the
# shipped model was) before any test-time training: a pretrained base by name (`smollm2-135m`, built
# from its package on first use) or a model folder (LoRA on every linear layer plus the embeddings,
# the paper's recipe), or a from-scratch preset (`micro`, `tiny`, `small`, `base`). The settings
# start from a named preset (`smollm2-cpu` sizes the paper's recipe for a CPU). The run resumes from
# its checkpoints when rerun, and stops cleanly at `MINUTES`.
# Several GPUs: run the same through `accelerate launch -m arc_kit pretrain ...` instead.

# %%
import os

SMOKE = os.environ.get("ARC_KIT_SMOKE") == "1"  # CI: a small run in a temporary folder
MODEL = "micro" if SMOKE else "smollm2-135m"  # a base name, a model folder (LoRA), or a from-scratch preset
PRESET = "from-scratch" if SMOKE else "smollm2-cpu"  # named training settings (arc_kit.settings.TRAINING_PRESETS)
RE_ARC = "../../shared/data/re_arc.tar.gz"  # a folder with tasks/<id>.json, or the archive; None to skip
TRAINING_TASKS = ("arc-agi-1/training",)  # mixed in whole beside RE-ARC; () for the paper's RE-ARC alone
OUT = "../runs/pretrain-notebook"  # the run folder (a temporary folder in smoke mode)
STEPS = 6 if SMOKE else 200  # the schedule's length
MINUTES = None  # stop cleanly after this long

# %%
import tempfile
from pathlib import Path

from arc_kit.settings import training_preset
from arc_kit.model.training import pretrain
from arc_kit.model.training_data import pretraining_data

if SMOKE:
    OUT = tempfile.mkdtemp(prefix="arc-kit-pretrain-")
settings = training_preset(PRESET).replace(steps=STEPS, minutes=MINUTES)
settings = settings.replace(data=settings.data.replace(task_sets=TRAINING_TASKS))
data = pretraining_data(RE_ARC if RE_ARC and Path(RE_ARC).exists() and not SMOKE else None, settings.data)
if SMOKE:
    settings = settings.replace(log_every=2, batch_size=1, gradient_accumulation=2,
                                sequences=settings.sequences.replace(max_tokens=1024))
result = pretrain(MODEL, OUT, data.pools, settings, weights=data.weights, data_description=data.description,
                  repeatable=data.repeatable)
result

# %%
from arc_kit.data.plotting import draw_loss_curve

figure = draw_loss_curve(Path(OUT) / "training_log.csv")  # drawn once, as the cell ends

# %% [markdown]
# The folder `OUT` is a model folder: `arc-kit dry-run --model OUT` solves tasks with it.
