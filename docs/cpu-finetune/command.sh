#!/usr/bin/env bash
# The paper's initial fine-tune on the CPU: SmolLM2-135M base, LoRA rank 32 + embeddings, RE-ARC + ARC-AGI-1 training.
cd "$(dirname "$0")/../.."  # the repository root
OMP_NUM_THREADS=1 exec .venv/bin/arc-kit pretrain --model smollm2-135m --out runs/cpu-finetune/model \
  --re-arc ../shared/data/re_arc.tar.gz --tasks arc-agi-1/training --preset smollm2-cpu \
  --steps 170 --minutes 170 --device cpu
