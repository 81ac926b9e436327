"""HWFV1 adaptive vs uniform FV1 wall time (CPU Numba or GPU Numba-CUDA), JSON lines.

    python benchmarks/hwfv1.py --levels 8 9 --eps 1e-2 1e-3 1e-4 --cases circular pseudo2d

For each case and L the uniform FV1 run is timed once and every eps runs the adaptive
scheme on the same device; records hold wall times, the speed-up, the share of the
adaptive step spent in the MRA (encode + significance + prediction + traversal; on the
GPU measured with CUDA events over extra steps after the timed run), steps and leaf counts
sampled over time.  ``--t-final`` overrides the paper's end times (circular 3.5 s,
pseudo-2D 40 s); the JSON says which end time was used.  ``--budget-s`` stops before a
new (case, L) once that much wall time has passed.  Compilation is excluded (warm-up on
L = 4 first).  The CPU adaptive runs use the O(tree nodes) step (``HWFV1Tree``;
``--cpu-mra full`` for the full-finest ``HWFV1``); the GPU runs replay CUDA graphs
(``--no-graph``: plain launches) and record how many steps took the O(nodes) path.
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


def make(mod, L, eps, device="cpu", graph=True, cpu_mra="tree"):
    sim = mod.setup(L=L, eps=eps)
    if device == "cpu" and cpu_mra == "tree" and eps is not None:
        from forestpy.solvers.hwfv1.solver import HWFV1Tree

        sim = HWFV1Tree(*sim.state(), sim.extent, eps=eps,
                        bc=tuple("wall" if w else "open" for w in sim.walls),
                        n_manning=sim.n_manning, g=sim.g, cfl=sim.cfl)
    if device == "gpu":
        from forestpy.solvers.hwfv1.gpu import HWFV1GPU

        sim = HWFV1GPU(*sim.state(), sim.extent, eps=eps,
                       bc=tuple("wall" if w else "open" for w in sim.walls),
                       n_manning=sim.n_manning, g=sim.g, cfl=sim.cfl)
        sim.use_graph = sim.use_graph and graph
    return sim


def timed(mod, L, eps, t_final, device="cpu", graph=True, cpu_mra="tree"):
    sim = make(mod, L, eps, device, graph, cpu_mra)
    t0 = time.perf_counter()
    sim.run(t_final)
    return sim, time.perf_counter() - t0


def gpu_info(uni, sim):
    """GPU runs: whether CUDA graphs were replayed (uniform, adaptive) and how many
    adaptive steps ran the O(tree nodes) MRA vs the full-finest fallback."""
    if not hasattr(sim, "use_graph"):
        return dict(cpu_mra="tree" if hasattr(sim, "sparse_steps") else "full",
                    **(dict(sparse_steps=sim.sparse_steps, full_steps=sim.full_steps)
                       if hasattr(sim, "sparse_steps") else {}))
    return dict(graph_uniform=uni._graph is not None, graph_adaptive=sim._graph is not None,
                graph_error=sim.graph_error or uni.graph_error,
                sparse_steps=sim.sparse_steps, full_steps=sim.full_steps)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--levels", nargs="+", type=int, default=[8, 9, 10, 11])
    ap.add_argument("--eps", nargs="+", type=float, default=[1e-2, 1e-3, 1e-4])
    ap.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    ap.add_argument("--t-final", nargs="+", default=[], metavar="CASE=T",
                    help="end times [s] (default: the paper's, circular=3.5 pseudo2d=40)")
    ap.add_argument("--budget-s", type=float, default=np.inf)
    ap.add_argument("--cpu-mra", default="tree", choices=("tree", "full"),
                    help="CPU adaptive step: O(tree nodes) (HWFV1Tree) or full-finest (HWFV1)")
    ap.add_argument("--no-graph", action="store_true",
                    help="GPU: plain kernel launches instead of CUDA-graph replays")
    a = ap.parse_args(argv)
    t_end = {case: t for case, (_, t) in CASES.items()}
    for item in a.t_final:
        case, _, t = item.partition("=")
        if case not in CASES or not t or not float(t) > 0:
            ap.error(f"--t-final wants CASE=T with CASE in {list(CASES)} and T > 0, got {item}")
        t_end[case] = float(t)
    start = time.perf_counter()
    for mod, _ in CASES.values():  # compile once
        timed(mod, 4, None, 0.05, a.device, not a.no_graph)
        timed(mod, 4, 1e-3, 0.05, a.device, not a.no_graph, a.cpu_mra)
    env = dict(device=a.device, machine=platform.node(), cpu_count=os.cpu_count(),
               numba_threads=numba.get_num_threads())
    if a.device == "gpu":
        from numba import cuda

        try:
            name = cuda.get_current_device().name
            env["gpu"] = name.decode() if isinstance(name, bytes) else str(name)
        except AttributeError:  # CUDA simulator
            env["gpu"] = "simulator"
    for case in a.cases:
        mod, t_final = CASES[case][0], t_end[case]
        for L in a.levels:
            if time.perf_counter() - start > a.budget_s:
                print(json.dumps(dict(bench="hwfv1", skipped=f"{case} L={L} t={t_final}",
                                      reason="--budget-s reached")), flush=True)
                continue
            uni, wall_u = timed(mod, L, None, t_final, a.device, not a.no_graph)
            hu = uni.state()[0]
            for eps in a.eps:
                sim, wall_a = timed(mod, L, eps, t_final, a.device, not a.no_graph, a.cpu_mra)
                hist = sim.leaf_history
                pick = np.linspace(0, len(hist) - 1, min(11, len(hist))).astype(int)
                ha = sim.state()[0]
                steps = sim.steps
                info = gpu_info(uni, sim)
                if a.device == "gpu":  # extra steps timed with CUDA events
                    tm, tf = sim.profile(20)
                    mra_share = tm / (tm + tf) if tm + tf > 0 else None
                else:
                    mra_share = sim.time_mra / (sim.time_mra + sim.time_fv)
                print(json.dumps(dict(
                    bench="hwfv1", case=case, L=L, eps=eps, t_final=t_final, **env,
                    wall_uniform_s=round(wall_u, 4), wall_adaptive_s=round(wall_a, 4),
                    speedup=round(wall_u / wall_a, 3),
                    ms_per_step_uniform=round(1e3 * wall_u / uni.steps, 4),
                    ms_per_step_adaptive=round(1e3 * wall_a / steps, 4),
                    mra_share=None if mra_share is None else round(mra_share, 3),
                    steps_uniform=uni.steps, steps_adaptive=steps,
                    cells=4**L, leaves_over_time=[[round(hist[k][0], 4), hist[k][1]] for k in pick],
                    mean_leaves=round(float(np.mean([n for _, n in hist])), 1),
                    max_diff_h_vs_uniform=float(np.abs(hu - ha).max()),
                    **info,
                )), flush=True)


if __name__ == "__main__":
    main()
