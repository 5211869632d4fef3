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
# # Initial fine-tuning
#
# Train a model on RE-ARC (and the ARC-AGI-1 training tasks) before any test-time training: a
# from-scratch preset (`micro`, `tiny`, `small`, `base`) or a pretrained model folder (LoRA, the
# paper's recipe). The run resumes from its checkpoints when rerun, and stops cleanly at `MINUTES`.
# Several GPUs: run the same through `accelerate launch -m arc_kit pretrain ...` instead.

# %%
import os

SMOKE = os.environ.get("ARC_KIT_SMOKE") == "1"  # CI: a small run in a temporary folder
MODEL = "micro" if SMOKE else "tiny"  # a preset, or a model folder to fine-tune with LoRA
RE_ARC = "../../shared/data/re_arc.tar.gz"  # a folder with tasks/<id>.json, or the archive; None to skip
TRAINING_TASKS = "arc-agi-1/training"  # never an evaluation set
OUT = "../runs/pretrain-notebook"  # the run folder (a temporary folder in smoke mode)
STEPS = 6 if SMOKE else 1000
MINUTES = None  # stop cleanly after this long
MAX_LEN = 1024 if SMOKE else 2048

# %%
import tempfile
from pathlib import Path

from arc_kit.models import PRESETS
from arc_kit.settings import SequenceSettings, training_preset
from arc_kit.training import pretrain
from arc_kit.training_data import pretraining_data

if SMOKE:
    OUT = tempfile.mkdtemp(prefix="arc-kit-pretrain-")
data = pretraining_data(RE_ARC if RE_ARC and Path(RE_ARC).exists() and not SMOKE else None, [TRAINING_TASKS])
settings = training_preset("from-scratch" if MODEL in PRESETS else "paper").replace(
    steps=STEPS, minutes=MINUTES, batch_size=1, gradient_accumulation=4, log_every=2 if SMOKE else 10,
    sequences=SequenceSettings(max_len=MAX_LEN, max_pairs=5))
result = pretrain(MODEL, OUT, data.pools, settings, weights=data.weights, data_description=data.description)
result

# %%
from arc_kit.plotting import draw_loss_curve

draw_loss_curve(Path(OUT) / "training_log.csv")

# %% [markdown]
# The folder `OUT` is a model folder: `arc-kit dry-run --model OUT` solves tasks with it.
