"""HWFV1 adaptive vs uniform FV1 wall time (CPU Numba or GPU Numba-CUDA), JSON lines.

    python benchmarks/hwfv1.py --levels 8 9 --eps 1e-2 1e-3 1e-4 --cases circular pseudo2d

For each case and L the uniform FV1 run is timed once and every eps runs the adaptive
scheme on the same machine; records hold wall times, the speed-up, the share of the
adaptive step spent in the MRA (encode + significance + prediction + traversal), steps
and leaf counts sampled over time.  ``--t-scale`` shortens the paper's end times
(circular 3.5 s, pseudo-2D 40 s) so that large L fit a time budget; the JSON says which
end time was used.  Compilation is excluded (a warm-up run on L=4 first).
"""

import argparse
import json
import os
import platform
import sys
import time

import numba
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "demos", "hwfv1"))

import circular_dam  # noqa: E402
import dam_break_2d  # noqa: E402

CASES = {"circular": (circular_dam, 3.5), "pseudo2d": (dam_break_2d, 40.0)}


def timed(mod, L, eps, t_final, device="cpu"):
    sim = mod.setup(L=L, eps=eps)
    if device == "gpu":
        from forestpy.solvers.hwfv1.gpu import HWFV1GPU

        sim = HWFV1GPU(*sim.state(), sim.extent, eps=eps,
                       bc=tuple("wall" if w else "open" for w in sim.walls),
                       n_manning=sim.n_manning, g=sim.g, cfl=sim.cfl)
    t0 = time.perf_counter()
    sim.run(t_final)
    wall = time.perf_counter() - t0
    return sim, wall


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--levels", nargs="+", type=int, default=[8, 9, 10, 11])
    ap.add_argument("--eps", nargs="+", type=float, default=[1e-2, 1e-3, 1e-4])
    ap.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    ap.add_argument("--t-scale", type=float, default=1.0,
                    help="multiply the paper's end times by this factor")
    a = ap.parse_args(argv)
    if not 0 < a.t_scale <= 1:
        ap.error("--t-scale must be in (0, 1]")
    for mod, _ in CASES.values():  # compile once
        timed(mod, 4, None, 0.05, a.device)
        timed(mod, 4, 1e-3, 0.05, a.device)
    env = dict(device=a.device, machine=platform.node(), cpu_count=os.cpu_count(),
               numba_threads=numba.get_num_threads())
    for case in a.cases:
        mod, t_paper = CASES[case]
        t_final = t_paper * a.t_scale
        for L in a.levels:
            uni, wall_u = timed(mod, L, None, t_final, a.device)
            for eps in a.eps:
                sim, wall_a = timed(mod, L, eps, t_final, a.device)
                hist = sim.leaf_history
                pick = np.linspace(0, len(hist) - 1, min(11, len(hist))).astype(int)
                hu, ha = uni.state()[0], sim.state()[0]
                print(json.dumps(dict(
                    bench="hwfv1", case=case, L=L, eps=eps, t_final=t_final, **env,
                    wall_uniform_s=round(wall_u, 4), wall_adaptive_s=round(wall_a, 4),
                    speedup=round(wall_u / wall_a, 3),
                    mra_share=round(sim.time_mra / (sim.time_mra + sim.time_fv), 3),
                    steps_uniform=uni.steps, steps_adaptive=sim.steps,
                    cells=4**L, leaves_over_time=[[round(hist[k][0], 4), hist[k][1]] for k in pick],
                    mean_leaves=float(np.mean([n for _, n in hist])),
                    max_diff_h_vs_uniform=float(np.abs(hu - ha).max()),
                )), flush=True)


if __name__ == "__main__":
    main()
