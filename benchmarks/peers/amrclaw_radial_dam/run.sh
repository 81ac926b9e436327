#!/bin/bash
# Rebuild the AMRClaw 5.14 radial-dam app and rerun all runs (one core each), printing
# one JSON record per run and appending them to benchmarks/results/amrclaw_radial_dam_2026-11-27.jsonl
# (each record carries the start time of its invocation as "sweep").
#
#   bash benchmarks/peers/amrclaw_radial_dam/run.sh            # all runs
#   CASES="3:128 5:32" TOLS="0.02" bash .../run.sh             # a subset
#
# Environment (defaults in brackets):
#   CLAW      Clawpack 5.14 source tree         [/work/peers/clawpack-5.14.0]
#   PEER_VENV venv with clawpack 5.14 installed [/work/peers/venv]
#   FORESTPY  forestpy checkout (its .venv)     [this checkout]
#   BUILD     build/run folder (outside forestpy) [/work/peers/apps/radial_dam]
#   REPEAT    runs per case, fastest reported [3]
#   RESULTS   JSON-lines file                  [benchmarks/results/amrclaw_radial_dam_2026-11-27.jsonl]
set -euo pipefail
APP=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FORESTPY=${FORESTPY:-$(cd "$APP/../../.." && pwd)}
CLAW_SRC=${CLAW:-/work/peers/clawpack-5.14.0}
PEER_VENV=${PEER_VENV:-/work/peers/venv}
BUILD=${BUILD:-/work/peers/apps/radial_dam}
RESULTS=${RESULTS:-$FORESTPY/benchmarks/results/amrclaw_radial_dam_2026-11-27.jsonl}
CASES=${CASES:-"1:512 3:128 5:32"}      # levels:coarsest cells per side (1:512 = uniform)
TOLS=${TOLS:-"0.005 0.01 0.02 0.05 0.1"}
export FC=gfortran
export FFLAGS=${FFLAGS:-"-O3 -march=native"}
export OMP_NUM_THREADS=1

mkdir -p "$BUILD"
# Private copy of the needed Clawpack source folders: Clawpack's make puts the .o/.mod
# files next to the library sources, so building against the shared tree would
# overwrite the objects of the GeoClaw apps built from it.
rm -rf "$BUILD/clawpack"
mkdir -p "$BUILD/clawpack/amrclaw" "$BUILD/clawpack/classic" "$BUILD/clawpack/riemann"
cp -r "$CLAW_SRC/clawutil" "$BUILD/clawpack/"
cp -r "$CLAW_SRC/amrclaw/src" "$BUILD/clawpack/amrclaw/"
cp -r "$CLAW_SRC/classic/src" "$BUILD/clawpack/classic/"
cp -r "$CLAW_SRC/riemann/src" "$BUILD/clawpack/riemann/"
find "$BUILD/clawpack" \( -name '*.o' -o -name '*.mod' \) -delete
export CLAW="$BUILD/clawpack"

cp "$APP"/Makefile "$APP"/setrun.py "$APP"/run_case.py "$APP"/*.f90 "$BUILD/"
(cd "$BUILD" && make new CLAW_PYTHON="$PEER_VENV/bin/python" FFLAGS="$FFLAGS" > build.log 2>&1) \
  || { tail -30 "$BUILD/build.log"; exit 1; }

# 1D radial reference (forestpy, 20000 cells) at the sample points of
# benchmarks/radial_dam.py::depth_error_along_axis (512 finest cells along y = 0+).
(cd "$FORESTPY" && .venv/bin/python - "$BUILD/reference_y0.npz" <<'PY'
import sys
import numpy as np
from forestpy.extensions.reference import sample, solve_radial_dam
n = 512
dx = 5.0 / n
x = -2.5 + (np.arange(n) + 0.5) * dx
y = np.full(n, 0.5 * 5.0 / n)
r, h, _ = solve_radial_dam(ncells=20000, t_final=1.0)
np.savez(sys.argv[1], x=x, y=y, h_ref=sample(r, h, np.hypot(x, y)))
PY
)

mkdir -p "$(dirname "$RESULTS")"
SWEEP=$(date -u +%Y-%m-%dT%H:%M:%SZ)   # records of one invocation share this; the file is appended to
for case in $CASES; do
  levels=${case%%:*}; mx=${case##*:}
  tols=$TOLS
  [ "$levels" = 1 ] && tols=${TOLS%% *}  # uniform grid: threshold unused, one run
  for tol in $tols; do
    "$PEER_VENV/bin/python" "$BUILD/run_case.py" --exe "$BUILD/xamr" \
      --rundir "$BUILD/runs/L${levels}_mx${mx}_tol${tol}" \
      --mx "$mx" --levels "$levels" --tol "$tol" \
      --reference "$BUILD/reference_y0.npz" --repeat "${REPEAT:-3}" --sweep "$SWEEP" | tee -a "$RESULTS"
  done
done
