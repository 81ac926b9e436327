#!/usr/bin/env bash
# Issue 32, item 4: the GPU tile step kernel in float64, float32 and mixed precision, on
# the same card in one call.  Run from the repository root on a GPU machine:
#   OUT=dir bash benchmarks/gpu_precision.sh [kernel] [radial] [okushiri] [regs] [step]
# kernel:   the kernel alone, 1e8 cells, mx 16 and 32 (float64 and mixed on float64
#           fields, float64 arithmetic and float32 on float32 fields), largest difference
#           from the FP64 CPU kernel; no FMA (as the GPU backend compiles)
# radial:   radial dam 512^2 uniform (mx 32, level 4) and 2048^2 (level 6), one dt: L1
#           error of the depth along y = 0 against the 1D reference, per precision
# okushiri: the adaptive Okushiri run per precision: gauge errors, run-up, wall time
# regs:     the FP32 kernel at register caps 80 and 64 (more blocks per multiprocessor)
# step:     whole uniform steps (radial dam level 9, mx 16) per precision
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
export NUMBA_ENABLE_CUDASIM=0 PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
for part in "${@:-kernel}"; do
case $part in
kernel)
  for dt in float64 float32; do
    k=tile,tile-mixed; [ $dt = float32 ] && k=tile,tile-float32
    timeout 240 $PY benchmarks/gpu_step.py --parts copy,kernel --kernel $k --mx 16,32 \
      --dtypes $dt --sizes 1e8 --fma 0 >> "$OUT/kernel.jsonl" 2>> "$OUT/kernel.err"
    echo "kernel $dt rc=$?"
  done
  grep -o '"kernel": "[a-z0-9-]*", "mx": [0-9]*, "dtype": "[a-z0-9]*"\|"Gcell_s": [0-9.]*\|"registers": [0-9]*\|"max_rel_diff_cpu_qnew": [0-9.e-]*\|"speedup": [0-9.]*' "$OUT/kernel.jsonl" | paste -s -d' ' ;;
radial)
  for lev in 4 6; do
    timeout 200 $PY benchmarks/radial_dam.py --inline --case uniform --backend gpu \
      --subcycle off --min-level $lev --precision float64 --precision mixed \
      --precision float32 >> "$OUT/radial.jsonl" 2>> "$OUT/radial.err"
    echo "radial level $lev rc=$?"
  done
  grep -o '"min_level": [0-9]*\|"precision": "[a-z0-9]*"\|"wall_s": [0-9.]*\|"cell_updates_per_s": [0-9]*\|"l1_depth_error_y0": [0-9.e-]*' "$OUT/radial.jsonl" | paste -s -d' ' ;;
okushiri)
  for p in float64 mixed float32; do
    timeout 170 $PY benchmarks/okushiri.py --backend gpu --case adaptive --subcycle off \
      --inline --precision $p >> "$OUT/okushiri.jsonl" 2>> "$OUT/okushiri.err"
    echo "okushiri $p rc=$?"
  done
  grep -o '"precision": "[a-z0-9]*"\|"wall_s": [0-9.]*\|"steps": [0-9]*\|"runup": [^}]*}' "$OUT/okushiri.jsonl" | paste -s -d' ' ;;
regs)  # the FP32 kernel at register caps that fit more blocks per multiprocessor
  timeout 300 $PY benchmarks/gpu_step.py --parts kernel --kernel tile-float32 --mx 16,32 \
    --dtypes float32 --sizes 1e8 --fma 0 --regs auto,80,64 >> "$OUT/regs.jsonl" 2>> "$OUT/regs.err"
  echo "regs rc=$?"
  grep -o '"mx": [0-9]*, "dtype"\|"max_registers": [0-9a-z]*\|"registers": [0-9]*\|"local_bytes": [0-9]*\|"Gcell_s": [0-9.]*' "$OUT/regs.jsonl" | paste -s -d' ' ;;
step)
  timeout 240 $PY benchmarks/gpu_step.py --parts step --levels 9 --mx 16 \
    --dtypes float64,float32 --precisions float64,mixed,float32 --nsteps 20 \
    >> "$OUT/step.jsonl" 2>> "$OUT/step.err"
  echo "step rc=$?"
  grep -o '"part": "[a-z]*"\|"dtype": "[a-z0-9]*"\|"precision": "[a-z0-9]*"\|"adaptive": [a-z]*\|"Gcell_s": [0-9.]*' "$OUT/step.jsonl" | paste -s -d' ' ;;
*) echo "unknown part $part" ;;
esac
done
for f in "$OUT"/*.err; do [ -s "$f" ] && { echo "== $f"; tail -n 15 "$f"; }; done
exit 0
