"""The optimisation pieces both trainers use: LoRA wrapping, parameter groups, the optimizer, the schedule.

The initial fine-tune (``training``) and test-time training (``ttt``) build their adapters,
optimizers and schedules here, so that neither imports the other. Rank-stabilised LoRA on every
linear layer, with the input embeddings and output head trained in full at their own learning rate
(the paper's recipe); AdamW, 8-bit where bitsandbytes works; linear warm-up then cosine decay.
This module knows torch, peft and transformers' models; it knows nothing of data or tasks.
"""

from __future__ import annotations

import math
import warnings
from contextlib import contextmanager

from arc_kit.model import devices


def embedding_module_names(model) -> list[str]:
    """Leaf names of the input embedding and output head modules (``embed_tokens``, ``lm_head``)."""
    targets = (model.get_input_embeddings(), model.get_output_embeddings())
    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                   if name and any(module is target for target in targets)})


@contextmanager
def quiet_peft(model):
    """Around peft wrapping ``model``: two of its warnings that do not apply silenced. peft asks transformers
    5.2x a question under its deprecated name; and peft 0.18 (Kaggle's) warns that tied embeddings are part of
    the adapter for any model whose class can tie them, also one whose head is its own tensor (an untied config)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        head, embeddings = model.get_output_embeddings(), model.get_input_embeddings()
        if head is None or embeddings is None or head.weight is not embeddings.weight:  # its own tensor: untied
            warnings.filterwarnings("ignore", message=".*`tie_word_embeddings=True` and a tied layer is part of")
        yield


def add_lora(model, rank: int, alpha: int, train_embeddings: bool, adapter_name: str = "default"):
    """Wrap a model in rank-stabilised LoRA on every linear layer; embeddings and head trained in full."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules="all-linear", use_rslora=True, lora_dropout=0.0,
                        bias="none", task_type="CAUSAL_LM",
                        modules_to_save=embedding_module_names(model) if train_embeddings else None)
    with quiet_peft(model):
        return get_peft_model(model, config, adapter_name=adapter_name)


def enable_activation_checkpointing(model) -> None:
    """Recompute activations in the backward pass, through whichever name this transformers has."""
    options = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers 5.2x
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=options)
    else:  # transformers 5.17
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=options)


def parameter_groups(model, learning_rate: float, embedding_learning_rate: float,
                     weight_decay: float = 0.0) -> list[dict]:
    """Trainable parameters split into 'embeddings' (input embeddings, output head) and 'weights'."""
    embedding_names = set(embedding_module_names(model))
    embeddings, weights = [], []
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        parts = set(name.split("."))
        (embeddings if parts & embedding_names else weights).append(parameter)
    groups = []
    if weights:
        groups.append({"params": weights, "lr": learning_rate, "weight_decay": weight_decay, "name": "weights"})
    if embeddings:
        groups.append({"params": embeddings, "lr": embedding_learning_rate, "weight_decay": 0.0,
                       "name": "embeddings"})
    if not groups:
        raise ValueError("the model has no trainable parameters")
    return groups


def build_optimizer(groups: list[dict], kind: str = "auto"):
    """AdamW, 8-bit (bitsandbytes) where it works when kind is 'auto' or 'adamw_8bit'."""
    import torch

    if kind == "auto":
        kind = "adamw_8bit" if devices.bitsandbytes_works() else "adamw"
    if kind == "adamw":
        return torch.optim.AdamW(groups, betas=(0.9, 0.999))
    if not devices.bitsandbytes_works():  # adamw_8bit, the settings' last choice
        raise devices.UnsupportedSetupError("8-bit AdamW needs bitsandbytes on a CUDA GPU; use optimizer='adamw'")
    import bitsandbytes

    return bitsandbytes.optim.AdamW8bit(groups, betas=(0.9, 0.999))


class WarmupCosine:
    """The learning rate's factor at a step: linear warm-up over ``warmup_ratio`` of ``steps``, then cosine decay to
    zero at ``steps`` (transformers' ``get_cosine_schedule_with_warmup``, the same numbers). ``steps`` may be set
    again as a run goes: a time limit fits the schedule to the steps that fit in it (``training``)."""

    def __init__(self, steps: int, warmup_ratio: float):
        self.steps, self.warmup_ratio = steps, warmup_ratio

    def __call__(self, step: int) -> float:
        warmup = int(round(self.steps * self.warmup_ratio))
        if step < warmup:
            return step / max(1, warmup)
        progress = min(1.0, (step - warmup) / max(1, self.steps - warmup))  # past its end: zero, never up again
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def cosine_schedule(optimizer, steps: int, warmup_ratio: float):
    """Linear warm-up over ``warmup_ratio`` of the steps, then cosine decay to zero (``WarmupCosine``, whose ``steps``
    a run may set again: ``schedule.lr_lambdas[0]``)."""
    from torch.optim.lr_scheduler import LambdaLR

    return LambdaLR(optimizer, WarmupCosine(steps, warmup_ratio))
