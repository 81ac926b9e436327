#!/usr/bin/env bash
# The GPU checks and timings that the CPU machines cannot run, in parts that each fit one
# 10-minute device call.  Every part writes JSON lines / logs under $OUT (default ./gpu_out)
# and prints a short summary; run from the repository root on a machine with a GPU:
#
#   bash benchmarks/gpu_validation.sh tests          # GPU test files on the real device
#   bash benchmarks/gpu_validation.sh parity         # GeoClaw demos, CPU vs GPU (one dt)
#   bash benchmarks/gpu_validation.sh kernel         # step kernel, unfused vs fused
#   bash benchmarks/gpu_validation.sh patch_kernel   # whole-patch kernel vs row tiles (issue 32)
#   bash benchmarks/gpu_validation.sh lbm_register   # register LBM kernel vs the cell kernel (issue 35)
#   bash benchmarks/gpu_validation.sh regrid         # host cost of a regrid on the GPU (issue 29)
#   bash benchmarks/gpu_validation.sh tworoe codecs lbm   # the new solvers' self-checking timings
#   bash benchmarks/gpu_validation.sh tworoe_gauges       # two-layer gauges: overhead, vs CPU
#   NRANKS=2 bash benchmarks/gpu_validation.sh tworoe_mpi # 2 or 4 GPUs: two-layer across ranks
#   bash benchmarks/gpu_validation.sh insitu insitu10x    # LBM on compressed subgrids
#   bash benchmarks/gpu_validation.sh mpi_tests           # 2+ GPUs: tests/mpi on the GPUs
#   NRANKS=2 bash benchmarks/gpu_validation.sh okushiri_mpi  # issue 36's crashing run
#   NRANKS=4 bash benchmarks/gpu_validation.sh regrid_mpi    # time per regrid, 1..NRANKS
#
# Python must import forestpy (an installed checkout, or PYTHONPATH set to the root).
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
export NUMBA_ENABLE_CUDASIM=0 PYTHONUNBUFFERED=1
# a system Open MPI refuses to start as root (the device machines run as root)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
PY=${PYTHON:-python3}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
for part in "$@"; do
case $part in
tests)
  timeout 580 $PY -m pytest -q -p no:cacheprovider tests/solvers/clawpack/test_gpu_kernel.py \
    tests/extensions/geoclaw/test_geoclaw_gpu.py tests/driver/io/test_codecs_gpu.py \
    tests/solvers/lbm tests/solvers/tworoe tests/driver/io/test_codec3d.py \
    -k "gpu or device or Gpu or GPU" \
    > "$OUT/tests.log" 2>&1
  tail -3 "$OUT/tests.log" ;;
parity)
  for demo in bowl_radial merewether; do
    timeout 290 $PY benchmarks/gpu_parity.py --geoclaw --demo $demo --subcycle off \
      > "$OUT/parity_$demo.jsonl" 2> "$OUT/parity_$demo.err"
    tail -c 600 "$OUT/parity_$demo.jsonl"
  done ;;
kernel)
  for fma in 0 1; do
    FORESTPY_GPU_FMA=$fma timeout 280 $PY benchmarks/gpu_step.py --parts kernel --mx 16,32 \
      --dtypes float64 > "$OUT/kernel_fma$fma.jsonl" 2> "$OUT/kernel_fma$fma.err"
    grep -o '"mx": [0-9]*, "cells": [0-9]*\|"Gcell_s": [0-9.]*' "$OUT/kernel_fma$fma.jsonl" \
      | paste - - | sed "s/^/fma=$fma /"
  done ;;
patch_kernel)
  timeout 250 $PY -m pytest -q -p no:cacheprovider tests/solvers/clawpack/test_gpu_patch_kernel.py \
    -m "slow or not slow" > "$OUT/patch_kernel_tests.log" 2>&1
  tail -1 "$OUT/patch_kernel_tests.log"
  timeout 320 $PY benchmarks/gpu_step.py --parts copy,kernel --kernel tile,patch,patch-noshare \
    --mx 16,32 --dtypes float64 --sizes 1e6,1e8 --fma 0 > "$OUT/patch_kernel.jsonl" \
    2> "$OUT/patch_kernel.err"
  grep -o '"kernel": "[a-z-]*"\|"mx": [0-9]*\|"Gcell_s": [0-9.]*\|"bitwise_equal": [a-z]*\|"max_diff_cpu": [0-9.e-]*' \
    "$OUT/patch_kernel.jsonl" | paste -s -d' ' ;;
tworoe)
  timeout 580 $PY benchmarks/tworoe.py --cells 1001898 3000948 --budget-s 500 \
    > "$OUT/tworoe.jsonl" 2> "$OUT/tworoe.err"
  tail -c 1500 "$OUT/tworoe.jsonl" ;;
tworoe_gauges)
  for g in 0 16; do
    timeout 280 $PY benchmarks/tworoe.py --cells 3000948 --schemes irroe --precisions float64 \
      --devices gpu --check-steps 3 --gauges $g > "$OUT/tworoe_gauges$g.jsonl" \
      2> "$OUT/tworoe_gauges$g.err"
    grep -o '"wall_s": [0-9.e-]*\|"gauge_rows": [0-9]*\|"max_abs_diff[a-z_]*": [0-9.e-]*' \
      "$OUT/tworoe_gauges$g.jsonl" | paste -s -d' ' | sed "s/^/gauges=$g /"
  done ;;
tworoe_mpi)
  NR=${NRANKS:-2}
  MPIRUN=${MPIRUN:-mpirun}
  timeout 250 $MPIRUN -n "$NR" $PY benchmarks/tworoe_mpi.py --cells 1001898 --check \
    > "$OUT/tworoe_mpi_$NR.jsonl" 2> "$OUT/tworoe_mpi_$NR.err"
  timeout 200 $MPIRUN -n "$NR" $PY benchmarks/tworoe_mpi.py --cells 3000948 \
    >> "$OUT/tworoe_mpi_$NR.jsonl" 2>> "$OUT/tworoe_mpi_$NR.err"
  timeout 120 $MPIRUN -n "$NR" $PY -m forestpy.cli run demos/tworoe/circular_dam.py \
    --set cells=1001898 --set backend=gpu --set frames=1 --quiet \
    --out "$OUT/tworoe_mpi_run_$NR" > "$OUT/tworoe_mpi_run_$NR.log" 2>&1
  tail -c 2500 "$OUT/tworoe_mpi_$NR.jsonl"; tail -3 "$OUT/tworoe_mpi_run_$NR.log" ;;
mpi_tests)
  # every tests/mpi test (slow ones included); the GPU scenarios run on the GPUs
  timeout 580 $PY -m pytest -q -p no:cacheprovider tests/mpi -m "slow or not slow" \
    > "$OUT/mpi_tests.log" 2>&1
  tail -3 "$OUT/mpi_tests.log" ;;
okushiri_mpi)
  # issue 36: stopped at t = 15.8 s with "'bool' object has no attribute 'astype'"
  NR=${NRANKS:-2}
  MPIRUN=${MPIRUN:-mpirun}
  timeout 560 $MPIRUN -n "$NR" $PY -m forestpy.cli run demos/geoclaw/okushiri.py \
    --backend gpu --out "$OUT/okushiri_mpi_$NR" > "$OUT/okushiri_mpi_$NR.log" 2>&1
  echo "rc=$?"; tail -25 "$OUT/okushiri_mpi_$NR.log" ;;
regrid_mpi)
  # time per regrid (tagging, forest, repartition, migration, plans) on 1..NRANKS GPUs,
  # checked against the 1-rank run and a CPU run
  NR=${NRANKS:-4}
  MPIRUN=${MPIRUN:-mpirun}
  SIZES=$(seq -s, 1 "$NR")
  timeout 560 $MPIRUN -n "$NR" $PY benchmarks/regrid_mpi.py --backend gpu --mx 32 \
    --levels 3,7 --trees 2 --sizes "$SIZES" --steps 40 --cpu-check \
    > "$OUT/regrid_mpi_$NR.jsonl" 2> "$OUT/regrid_mpi_$NR.err"
  grep -o '"ranks": [0-9]*\|"regrid_s": [0-9.e-]*\|"plans_s": [0-9.e-]*\|"migration_s": [0-9.e-]*\|"max_diff_vs_[a-z0-9]*": [0-9.e-]*\|"round": [0-9]' \
    "$OUT/regrid_mpi_$NR.jsonl" | paste -s -d' ' ;;
codecs)
  timeout 580 $PY benchmarks/compression.py --gpu --no-rd --no-cpu --data radial_dam --quick \
    > "$OUT/compression_gpu.jsonl" 2> "$OUT/compression_gpu.err"
  tail -c 1500 "$OUT/compression_gpu.jsonl" ;;
lbm)
  timeout 580 $PY benchmarks/lbm.py --backend gpu --check-only --check-n 24 \
    > "$OUT/lbm_check.jsonl" 2> "$OUT/lbm_check.err"
  timeout 400 $PY benchmarks/lbm.py --backend gpu --n 128,256 --steps 200 \
    > "$OUT/lbm_gpu.jsonl" 2> "$OUT/lbm_gpu.err"
  tail -c 1500 "$OUT/lbm_check.jsonl" "$OUT/lbm_gpu.jsonl" ;;
lbm_register)
  timeout 150 $PY -m pytest -q -p no:cacheprovider tests/solvers/lbm/test_lbm_register.py \
    > "$OUT/lbm_register_tests.log" 2>&1
  tail -1 "$OUT/lbm_register_tests.log"
  timeout 420 $PY benchmarks/lbm.py --backend gpu --kernels cell,register --n 128,256 --steps 200 \
    --dtype float32,float64,float16 > "$OUT/lbm_kernels.jsonl" 2> "$OUT/lbm_kernels.err"
  grep -o '"kernel": "[a-z]*"\|"same_bits": [a-z]*\|"mlups": [0-9.]*\|"speedup": [0-9.]*\|"share_of_copy": [0-9.]*' \
    "$OUT/lbm_kernels.jsonl" | paste -s -d' ' ;;
regrid)
  timeout 150 $PY -m pytest -q -p no:cacheprovider tests/core/patches/test_gpu_patches.py \
    tests/driver/test_regrid_device.py tests/driver/test_gpu_simulation.py \
    tests/core/forest/test_forest_adapt.py > "$OUT/regrid_tests.log" 2>&1
  tail -1 "$OUT/regrid_tests.log"
  timeout 200 $PY benchmarks/regrid.py --backend gpu --mx 16 --nsteps 20 --compare-cpu \
    > "$OUT/regrid_gpu.jsonl" 2> "$OUT/regrid_gpu.err"
  timeout 200 $PY benchmarks/regrid.py --backend gpu --mx 16 --nsteps 20 --forest separate \
    > "$OUT/regrid_gpu_separate.jsonl" 2> "$OUT/regrid_gpu_separate.err"
  tail -c 1200 "$OUT/regrid_gpu.jsonl" ;;
insitu)
  for kernel in cell register; do
    timeout 290 $PY benchmarks/lbm_insitu.py --gpu --kernel $kernel --steps 200 \
      --codecs none,dwt53:tol=1e-6,dwt53:tol=1e-5 \
      > "$OUT/lbm_insitu_gpu_$kernel.jsonl" 2> "$OUT/lbm_insitu_gpu_$kernel.err"
    tail -c 1500 "$OUT/lbm_insitu_gpu_$kernel.jsonl"
  done ;;
insitu10x)
  timeout 580 $PY benchmarks/lbm_insitu.py --gpu --no-check --flow wave --dtype float64 \
    --grid 16,16,262144 --subgrids 1,1,64 --tol 1e-8 --force 0 --u0 0.01 --startup '' \
    --chunk 1 --steps 100 --codecs dwt53:tol=1e-8 --memory-factor 10 \
    > "$OUT/lbm_insitu_10x.jsonl" 2> "$OUT/lbm_insitu_10x.err"
  tail -c 3000 "$OUT/lbm_insitu_10x.jsonl" ;;
*) echo "unknown part $part (tests parity kernel tworoe tworoe_gauges tworoe_mpi codecs" \
     "lbm insitu insitu10x mpi_tests okushiri_mpi regrid_mpi)" >&2; exit 2 ;;
esac
done
