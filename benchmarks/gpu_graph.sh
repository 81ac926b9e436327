#!/usr/bin/env bash
# Issue 29, item 6: one-dt GPU steps replayed as CUDA graphs (forestpy/step_graph.py)
# against the same runs without graphs, interleaved on the same card in one call.
# Each record has wall_s, timers, graph_captures / graph_replays / graph_off_reason and
# interior_digest (bitwise comparison of the final states).  Run from the repository
# root on a GPU machine:  OUT=dir bash benchmarks/gpu_graph.sh [okushiri] [merewether] [cpu] [parity] [kernel] [radial] [mcpu] [share] [regrid] [gc] [oprofile] [defer] [tags] [compare] [rcompare]
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
export NUMBA_ENABLE_CUDASIM=0 PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
show() {
  grep -o '"wall_s": [0-9.]*\|"steps": [0-9]*\|"gpu_graph": [a-z]*\|"graph_captures": [0-9]*\|"graph_replays": [0-9]*\|"graph_off_reason": [^,]*\|"interior_digest": \[[^]]*\]\|"host_transfers_per_step": [0-9.]*' "$1" | paste -s -d' '
}
for part in "${@:-okushiri}"; do
case $part in
okushiri)  # records appended to one file (the device returns a few files only)
  for run in 1 2; do
    for g in 0 1; do
      FORESTPY_GPU_GRAPH=$g timeout 170 $PY benchmarks/okushiri.py --backend gpu \
        --case adaptive --subcycle off --inline > "$OUT/one.jsonl" 2>> "$OUT/okushiri.err"
      echo "okushiri graph=$g run=$run rc=$? $(show "$OUT/one.jsonl")"
      cat "$OUT/one.jsonl" >> "$OUT/okushiri.jsonl"
    done
  done ;;
merewether)
  for g in 0 1; do
    FORESTPY_GPU_GRAPH=$g timeout 150 $PY benchmarks/merewether.py --backend gpu \
      --subcycle off > "$OUT/one.jsonl" 2>> "$OUT/merewether.err"
    echo "merewether graph=$g rc=$? $(show "$OUT/one.jsonl")"
    cat "$OUT/one.jsonl" >> "$OUT/merewether.jsonl"
  done ;;
cpu)  # the CPU backend on the same host: one core and all cores (its default, subcycled)
  for th in 1 16; do
    NUMBA_NUM_THREADS=$th timeout 200 $PY benchmarks/okushiri.py --backend cpu \
      --case adaptive --inline > "$OUT/one.jsonl" 2>> "$OUT/cpu.err"
    echo "okushiri cpu threads=$th rc=$? $(show "$OUT/one.jsonl")"
    cat "$OUT/one.jsonl" >> "$OUT/okushiri_cpu.jsonl"
  done ;;
parity)  # CPU against GPU (graphs on by default): same forests, steps, states
  for demo in bowl_radial; do
    timeout 250 $PY benchmarks/gpu_parity.py --geoclaw --demo $demo --subcycle off \
      >> "$OUT/parity.jsonl" 2>> "$OUT/parity.err"
    echo "parity $demo rc=$?"; tail -c 700 "$OUT/parity.jsonl"
  done ;;
kernel)  # issue 32: the row-tile and the whole-patch step kernels, same patches, no FMA
  timeout 200 $PY benchmarks/gpu_step.py --parts kernel --kernel tile,patch \
    --mx 16,32 --dtypes float64 --sizes 1e8 --fma 0 >> "$OUT/kernel.jsonl" 2>> "$OUT/kernel.err"
  echo "kernel rc=$?"; grep -o '"kernel": "[a-z-]*", "mx": [0-9]*\|"Gcell_s": [0-9.]*\|"max_rel_diff_cpu_qnew": [0-9.e-]*\|"bitwise_equal": [a-z]*\|"speedup": [0-9.]*' "$OUT/kernel.jsonl" | paste -s -d' ' ;;
radial)  # issue 29: radial dam adaptive L7-9 (one dt), steps without and with regrids
  for g in 0 1; do
    FORESTPY_GPU_GRAPH=$g timeout 150 $PY benchmarks/gpu_step.py --parts step,run \
      --levels 9 --adaptive --mx 16 --dtypes float64 --nsteps 20 >> "$OUT/radial.jsonl" 2>> "$OUT/radial.err"
    echo "radial graph=$g rc=$?"; tail -n 2 "$OUT/radial.jsonl" | cut -c1-400
  done ;;
mcpu)  # Merewether on the CPU backend, all cores of the host (one dt, as the GPU run)
  NUMBA_NUM_THREADS=16 timeout 200 $PY benchmarks/merewether.py --backend cpu --subcycle off \
    > "$OUT/one.jsonl" 2>> "$OUT/mcpu.err"
  echo "merewether cpu 16 rc=$? $(show "$OUT/one.jsonl")"
  cat "$OUT/one.jsonl" >> "$OUT/merewether_cpu.jsonl" ;;
share)  # Okushiri: the step kernels' device seconds (CUDA events, graphs off) and launches
  FORESTPY_GPU_GRAPH=0 timeout 170 $PY benchmarks/okushiri.py --backend gpu --case adaptive \
    --subcycle off --inline --step-events > "$OUT/one.jsonl" 2>> "$OUT/share.err"
  echo "okushiri step events rc=$? $(show "$OUT/one.jsonl") $(grep -o '"step_kernel_[a-z_]*": [0-9.]*\|"host_launches_per_step": [0-9.]*' "$OUT/one.jsonl" | paste -s -d' ')"
  cat "$OUT/one.jsonl" >> "$OUT/share.jsonl"
  FORESTPY_GPU_GRAPH=1 timeout 170 $PY benchmarks/okushiri.py --backend gpu --case adaptive \
    --subcycle off --inline > "$OUT/one.jsonl" 2>> "$OUT/share.err"
  echo "okushiri graphs rc=$? $(show "$OUT/one.jsonl") $(grep -o '"host_launches_per_step": [0-9.]*' "$OUT/one.jsonl")"
  cat "$OUT/one.jsonl" >> "$OUT/share.jsonl" ;;
regrid)  # issue 29: the phases of each regrid of the radial dam L7-9, mx 16, synchronised
  timeout 200 $PY benchmarks/regrid.py --backend gpu --mx 16 --nsteps 20 --profile 40 \
    > "$OUT/regrid.jsonl" 2> "$OUT/regrid.err"
  echo "regrid rc=$?"; tail -n 1 "$OUT/regrid.jsonl" | cut -c1-1500 ;;
gc)  # issue 29: does Python's cycle collector cost the regrid? default / freeze / off
  for g in default freeze off; do
    timeout 120 $PY benchmarks/regrid.py --backend gpu --mx 16 --nsteps 20 --gc $g \
      > "$OUT/one.jsonl" 2>> "$OUT/gc.err"
    echo "regrid gc=$g rc=$? $(tail -n 1 "$OUT/one.jsonl" | $PY -c 'import json,sys; r=json.loads(sys.stdin.read()); print(r["wall_s"], r["gc_collections"], (r["ms_changed"] or {}).get("total"), (r["ms_unchanged"] or {}).get("total"))')"
    cat "$OUT/one.jsonl" >> "$OUT/gc.jsonl"
  done
  timeout 120 $PY benchmarks/regrid.py --backend gpu --mx 16 --nsteps 20 --profile 45 \
    --profile-sort tottime > "$OUT/one.jsonl" 2> "$OUT/gc_profile.err"
  echo "profile tottime rc=$?" ;;
defer)  # Okushiri graphs on: the gauges' and fgmax's on_step run after each step (0) or
  # while the next step is on the device (1); same digests of the state and gauges
  for run in 1 2; do
    for d in 0 1; do
      FORESTPY_DEFER_CALLBACKS=$d timeout 170 $PY benchmarks/okushiri.py --backend gpu \
        --case adaptive --subcycle off --inline > "$OUT/one.jsonl" 2>> "$OUT/defer.err"
      echo "okushiri defer=$d run=$run rc=$? $(show "$OUT/one.jsonl") $(grep -o '"defer_callbacks": [a-z]*\|"gauge_digest": \[[^]]*\]\|"output": [0-9.]*\|"cfl_check": [0-9.]*\|"regrid": [0-9.]*' "$OUT/one.jsonl" | paste -s -d' ')"
      cat "$OUT/one.jsonl" >> "$OUT/defer.jsonl"
    done
  done ;;
tags)  # Okushiri graphs on: tagging passes run plainly (0) or replayed from graphs (1)
  for run in 1 2; do
    for tg in 0 1; do
      FORESTPY_TAG_GRAPH=$tg timeout 170 $PY benchmarks/okushiri.py --backend gpu \
        --case adaptive --subcycle off --inline > "$OUT/one.jsonl" 2>> "$OUT/tags.err"
      echo "okushiri tag_graph=$tg run=$run rc=$? $(show "$OUT/one.jsonl") $(grep -o '"tag_graph_[a-z_]*": [^,]*\|"gauge_digest": \[[^]]*\]\|"output": [0-9.]*\|"cfl_check": [0-9.]*\|"regrid": [0-9.]*\|"regrid.tagging": [0-9.]*\|"regrids": [0-9]*' "$OUT/one.jsonl" | paste -s -d' ')"
      cat "$OUT/one.jsonl" >> "$OUT/tags.jsonl"
    done
  done ;;
compare)  # Okushiri: the code before ($BEFORE: a tree installed into $BEFORE_SITE) and
  # now, interleaved, then now without the tagging graphs and without deferred callbacks
  for run in 1 2; do
    for v in before now; do
      if [ $v = before ]; then
        PYTHONPATH=$BEFORE_SITE:${PYTHONPATH:-} timeout 170 $PY $BEFORE/benchmarks/okushiri.py \
          --backend gpu --case adaptive --subcycle off --inline > "$OUT/one.jsonl" 2>> "$OUT/compare.err"
      else
        timeout 170 $PY benchmarks/okushiri.py --backend gpu --case adaptive --subcycle off \
          --inline > "$OUT/one.jsonl" 2>> "$OUT/compare.err"
      fi
      echo "okushiri $v run=$run rc=$? $(show "$OUT/one.jsonl") $(grep -o '"tag_graph_[a-z_]*": [^,]*\|"defer_callbacks": [a-z]*\|"gauge_digest": \[[^]]*\]\|"output": [0-9.]*\|"cfl_check": [0-9.]*\|"regrid": [0-9.]*\|"regrid.tagging": [0-9.]*\|"host_launches_per_step": [0-9.]*\|"runup_m": [0-9.]*' "$OUT/one.jsonl" | paste -s -d' ')"
      sed "s/^{/{\"version\": \"$v\", /" "$OUT/one.jsonl" >> "$OUT/compare.jsonl"
    done
  done
  for env in FORESTPY_TAG_GRAPH=0 FORESTPY_DEFER_CALLBACKS=0; do
    env $env timeout 170 $PY benchmarks/okushiri.py --backend gpu --case adaptive --subcycle off \
      --inline > "$OUT/one.jsonl" 2>> "$OUT/compare.err"
    echo "okushiri $env rc=$? $(show "$OUT/one.jsonl") $(grep -o '"tag_graph_[a-z_]*": [^,]*\|"defer_callbacks": [a-z]*\|"output": [0-9.]*\|"cfl_check": [0-9.]*\|"regrid": [0-9.]*' "$OUT/one.jsonl" | paste -s -d' ')"
    sed "s/^{/{\"version\": \"$env\", /" "$OUT/one.jsonl" >> "$OUT/compare.jsonl"
  done ;;
rcompare)  # the radial dam L7-9 (regrid every 2 steps): before ($BEFORE) and now
  for v in before now; do
    if [ $v = before ]; then
      PYTHONPATH=$BEFORE_SITE:${PYTHONPATH:-} timeout 150 $PY $BEFORE/benchmarks/gpu_step.py --parts step,run \
        --levels 9 --adaptive --mx 16 --dtypes float64 --nsteps 20 > "$OUT/one.jsonl" 2>> "$OUT/rcompare.err"
    else
      timeout 150 $PY benchmarks/gpu_step.py --parts step,run --levels 9 --adaptive --mx 16 \
        --dtypes float64 --nsteps 20 > "$OUT/one.jsonl" 2>> "$OUT/rcompare.err"
    fi
    echo "radial $v rc=$?"; tail -n 2 "$OUT/one.jsonl" | cut -c1-400
    sed "s/^{/{\"version\": \"$v\", /" "$OUT/one.jsonl" >> "$OUT/rcompare.jsonl"
  done ;;
oprofile)  # Okushiri graphs on, cProfile of a warm run (the host's share, by function)
  timeout 170 $PY benchmarks/okushiri.py --backend gpu --case adaptive --subcycle off \
    --inline > "$OUT/one.jsonl" 2>> "$OUT/oprofile.err"
  echo "okushiri warm-up rc=$? $(show "$OUT/one.jsonl")"
  timeout 170 $PY -m cProfile -o "$OUT/okushiri.prof" benchmarks/okushiri.py --backend gpu \
    --case adaptive --subcycle off --inline > "$OUT/one.jsonl" 2>> "$OUT/oprofile.err"
  echo "okushiri profiled rc=$? $(show "$OUT/one.jsonl")"
  $PY -c "import pstats; s=pstats.Stats('$OUT/okushiri.prof'); s.sort_stats('tottime').print_stats(40); s.sort_stats('cumulative').print_stats(60)" > "$OUT/okushiri_profile.txt" 2>&1 ;;
esac
done
rm -f "$OUT/one.jsonl"
