#!/bin/bash
# The evaluation of docs/sudoku/README.md: all 100 test puzzles, the paper's recipe (DFS at T = 1% under
# 8 views, product of experts over 8 fresh views, top-1), one thread; rerun to resume. --batched runs the
# views after the first as DFS lanes together (3x faster here): the same candidates unless a cap is hit.
# Options given to this script are passed on (e.g. --minutes 80).
set -e
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
.venv/bin/arc-kit sudoku evaluate --model runs/sudoku/model --puzzles runs/sudoku/test.csv --out runs/sudoku/eval \
  --threshold 0.01 --augmentations 8 --scoring-augmentations 8 --max-forward-calls 20000 --batched --device cpu "$@"
