#!/bin/bash
# forestpy against AMRClaw 5.14 on the radial dam break, side by side on one core, in
# one run: AMRClaw (benchmarks/peers/amrclaw_radial_dam/run.sh) at 3 and 5 levels, then
# forestpy subcycled and with one dt for all levels at the patch sizes 32, 16 and 8
# (coarsest 128 x 128, finest equivalent 512 x 512), each at a few refine thresholds.
# JSON lines into $OUT (default benchmarks/results/subcycling_<date>/).
#
#   bash benchmarks/peers/compare_radial_dam.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$ROOT/benchmarks/results/subcycling_$(date +%F)}
TOLS=${TOLS:-"0.01 0.02 0.05"}
mkdir -p "$OUT"
CASES="1:512 3:128 5:32" TOLS="$TOLS" REPEAT=${REPEAT:-2} RESULTS="$OUT/amrclaw.jsonl" \
  bash "$ROOT/benchmarks/peers/amrclaw_radial_dam/run.sh" > /dev/null
PY=$ROOT/.venv/bin/python
for spec in "32 2" "16 3" "8 4"; do
  set -- $spec
  for tol in $TOLS; do
    NUMBA_NUM_THREADS=1 $PY "$ROOT/benchmarks/radial_dam.py" --inline --case adaptive \
      --mx "$1" --min-level "$2" --threshold "$tol" --subcycle on --subcycle off \
      >> "$OUT/forestpy.jsonl"
  done
done
NUMBA_NUM_THREADS=1 $PY "$ROOT/benchmarks/radial_dam.py" --inline --case uniform \
  >> "$OUT/forestpy.jsonl"
echo "$OUT"
