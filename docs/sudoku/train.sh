#!/bin/bash
# The CPU run of docs/sudoku/README.md: puzzles from seeds (test first, the training set kept off its
# solution grids), then the tiny model from scratch on one thread, in the background; rerun to resume.
set -e
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p runs/sudoku
[ -f runs/sudoku/test.csv ] || .venv/bin/arc-kit sudoku generate --count 100 --seed 2 --out runs/sudoku/test.csv
[ -f runs/sudoku/train.csv ] || .venv/bin/arc-kit sudoku generate --count 6000 --seed 1 \
  --exclude runs/sudoku/test.csv --out runs/sudoku/train.csv
nohup .venv/bin/arc-kit sudoku train --model tiny --puzzles runs/sudoku/train.csv --out runs/sudoku/model \
  --steps 7500 --minutes 88 --save-every 100 --log-every 20 --device cpu >> runs/sudoku/train.log 2>&1 &
echo "training in the background (pid $!); log: runs/sudoku/train.log, runs/sudoku/model/training_log.csv"
