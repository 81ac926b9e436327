#!/usr/bin/env bash
# Issue 29, item 6: one-dt GPU steps replayed as CUDA graphs (forestpy/step_graph.py)
# against the same runs without graphs, interleaved on the same card in one call.
# Each record has wall_s, timers, graph_captures / graph_replays / graph_off_reason and
# interior_digest (bitwise comparison of the final states).  Run from the repository
# root on a GPU machine:  OUT=dir bash benchmarks/gpu_graph.sh [okushiri] [merewether] [cpu] [parity]
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
esac
done
rm -f "$OUT/one.jsonl"
