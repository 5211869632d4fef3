"""check-model's estimate of test-time training's memory against a measurement, on the CPU.

A randomly initialised model of SmolLM2-135M's shape (the shipped model's base: Llama, 30 layers, hidden 576,
the authors' 76 tokens), float32 on the CPU, takes one step of the kit's test-time training (its LoRA, the
embeddings and head trained, AdamW) on one sequence of N tokens, in a fresh process each time, after a
first step on 64 tokens; the measurement is that process's peak resident memory during the second step
less its resident memory just before, and, exactly, the bytes of every tensor the backward keeps (counted
once per storage, the parameters aside). The estimate of the first is ``training_bytes`` less what is
there before the step (the trained parameters, AdamW's moments), of the second its activations alone.
The estimate is ``arc_kit.model.memory.training_bytes`` with 4-byte values. (Linux only: the peak is
the kernel's VmHWM, reset before the step.)

    OMP_NUM_THREADS=1 python scripts/ttt_memory_check.py 1024 2048
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys

SMOLLM2 = dict(model_type="llama", num_hidden_layers=30, hidden_size=576, intermediate_size=1536,
               num_attention_heads=9, num_key_value_heads=3, vocab_size=76, max_position_embeddings=8192,
               tie_word_embeddings=False)


def resident_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize()


def reset_peak() -> None:
    """Linux: the process's peak resident memory (VmHWM) starts again from what it holds now."""
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


def peak_bytes() -> int:
    with open("/proc/self/status") as handle:
        line = next(line for line in handle if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def one_step(tokens: int, checkpointing: bool) -> dict:
    """In this process: the model, then one training step; what it measured and what the kit estimates."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from arc_kit.model.checks import architecture_of
    from arc_kit.model.memory import ADAMW_BYTES, training_bytes
    from arc_kit.model.optimization import add_lora, enable_activation_checkpointing
    from arc_kit.settings import TEST_TIME_TRAINING

    settings = TEST_TIME_TRAINING.replace(gradient_checkpointing=checkpointing)
    config = {key: value for key, value in SMOLLM2.items() if key != "model_type"}
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**config, attn_implementation="sdpa"))
    model = add_lora(model, settings.lora_rank, settings.lora_alpha, settings.train_embeddings)
    if checkpointing:
        enable_activation_checkpointing(model)
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    ids = torch.randint(0, 76, (1, tokens), generator=torch.Generator().manual_seed(1))
    warm = ids[:, :64]  # a first short step: the libraries' one-time buffers and AdamW's state come before the count
    model(input_ids=warm, labels=warm).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    reset_peak()
    before = resident_bytes()
    parameters, saved = {p.data_ptr() for p in model.parameters()}, {}

    def keep(tensor):  # what the backward keeps: every saved tensor's storage, the parameters aside, once each
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    architecture = architecture_of(SMOLLM2)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    estimated = training_bytes(architecture, settings, tokens, value_bytes=4)
    return {"tokens": tokens, "checkpointing": checkpointing, "peak": peak_bytes() - before,
            "saved": sum(saved.values()), "estimated_saved": estimated - trained * ADAMW_BYTES,
            "estimated_step": estimated - trained * (4 + 8)}  # less what is there before: parameters, moments


def main(lengths: list[int]) -> None:
    print("| tokens | checkpointing | saved for the backward: measured / estimated (GiB) | the step's peak: "
          "measured / estimated (GiB) |")
    print("|---|---|---|---|")
    for tokens in lengths:
        for checkpointing in (False, True):
            done = subprocess.run([sys.executable, __file__, "--one", str(tokens), str(int(checkpointing))],
                                  capture_output=True, text=True, check=True)
            row = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"| {tokens} | {'on' if checkpointing else 'off'} | {row['saved'] / 2**30:.3f} / "
                  f"{row['estimated_saved'] / 2**30:.3f} | {row['peak'] / 2**30:.2f} / "
                  f"{row['estimated_step'] / 2**30:.2f} |", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--one":
        print(json.dumps(one_step(int(sys.argv[2]), bool(int(sys.argv[3])))))
    else:
        main([int(value) for value in sys.argv[1:]])
