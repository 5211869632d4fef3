#!/bin/bash
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
.venv/bin/python -m arc_kit sudoku train --model tiny --puzzles runs/sudoku/train.csv --out runs/sudoku/tiny \
  --steps 1400 --minutes 26 --save-every 200 --log-every 20 --device cpu
