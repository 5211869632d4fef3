#!/bin/bash
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
.venv/bin/python -m arc_kit sudoku evaluate --model runs/sudoku/tiny --puzzles runs/sudoku/test.csv --limit 100 \
  --out runs/sudoku/eval --threshold 0.01 --augmentations 8 --scoring-augmentations 8 --max-forward-calls 2000 \
  --minutes 16 --device cpu
