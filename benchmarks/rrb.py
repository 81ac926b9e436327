"""Performance of the RRB-PCG solver and of one VBM time frame.  One JSON record a line:

* ``agree``: CPU and GPU (CUDA-graph iterations and plain launches) on a random
  variable-coefficient operator: iterations, residual history and solution agree;
* ``iters``: Poisson (u = x(x-1)y(y-1)exp(xy)), N cells a side, (N-1)^2 unknowns: RRB-PCG
  iterations to a relative M^-1 residual of 1e-8, solve time (CPU and/or GPU), max error;
* ``scipy``: scipy CG preconditioned by threshold ILU (spilu, drop_tol 1e-2 and 1e-4),
  by one AMG V-cycle of pyamg (smoothed aggregation, Ruge-Stueben; only where pyamg is
  installed: not a dependency) and by RRB through its LinearOperator view, on the same
  problems: iterations;
* ``copy``: device-to-device copy bandwidth (bytes read + written), the roofline;
* ``routine``: each GPU routine alone (Schur matvec + dot, vector updates, dot, every
  preconditioner kernel by level): time and achieved bandwidth from the bytes it must
  move, against the copy;
* ``breakdown`` (GPU, not in the default parts): where a solve's time goes (setup,
  iterations, gated iterations, finish, copies; first chunk from the last solve or not;
  the whole solve as one graph or three);
* ``chain`` (GPU, not in the default parts): the marginal device time of each kernel
  of one CG iteration inside the solver's graph (graphs of its first n launches);
* ``vbm``: one full VBM frame (explicit updates + one warm-started RRB solve).

``--stop-level default,6`` runs the GPU parts ``iters`` and ``breakdown`` for each
listed stopping level (``default``: the solver's own choice); ``--pdl on,off`` runs
``breakdown`` and ``chain`` with programmatic graph edges and without.

Usage::

    python benchmarks/rrb.py [--parts agree,iters,scipy,routines,breakdown,chain,vbm]
        [--gpu] [--quick] [--sizes 1225,4096] [--stop-level default,6] [--pdl on,off]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from functools import partial

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def emit(rec):
    print(json.dumps(rec), flush=True)


def poisson(N):
    from forestpy.solvers import rrb

    h = 1.0 / N
    x = np.arange(1, N) * h
    X, Y = np.meshgrid(x, x)
    E = np.exp(X * Y)
    Xp, Yp = X * X - X, Y * Y - Y
    u = Xp * Yp * E
    f = -(
        Yp * E * (2 + 2 * Y * (2 * X - 1) + Y * Y * Xp)
        + Xp * E * (2 + 2 * X * (2 * Y - 1) + X * X * Yp)
    )
    st = rrb.stencil_poisson(N - 1, N - 1, h)
    return st, f, u


def part_iters(Ns, backends, tol=1e-8, reps=3, loose_tol=1e-3, check_every=(8,),
               stop_levels=(None,)):
    from forestpy.solvers import rrb

    for N in Ns:
        st, f, u = poisson(N)
        solvers = []
        for b in backends:
            for k in stop_levels if b == "gpu" else (None,):
                t0 = time.perf_counter()
                solvers.append((b, rrb.RRBSolver(st, level=k, backend=b)))
                solvers[-1] += (time.perf_counter() - t0,)
        for b, s, t_build in solvers:
            xp = s.backend.xp
            rhs = xp.asarray(f)
            # GPU: CUDA-graph iterations (default) and plain launches; a looser
            # tolerance (paper-like ~5-7 iterations) as an extra row, not the headline;
            # the device stopping rule read every k iterations (k = 1: every one)
            # (first chunk as long as the last solve, the default, or ``fresh``: of
            # check_every iterations, as in a solver's first solve)
            # ``inplace``: the same rhs and an ``out=`` array in every solve, which the
            # graphs then read / write in place (no copies through the solver's buffers)
            ks = list(check_every) if b == "gpu" else [None]
            variants = [(tol, None, kc, False, False) for kc in ks]
            if b == "gpu" and s._gpu.use_graph:
                variants += [(tol, False, ks[0], False, False)]
                variants += [(loose_tol, None, kc, False, False) for kc in ks]
                variants += [(tl, None, ks[0], True, False) for tl in (tol, loose_tol)]
                variants += [(tl, None, ks[0], False, True) for tl in (tol, loose_tol)]
            out = xp.zeros_like(rhs)
            for tl, graph, kc, fresh, inplace in variants:
                o = out if inplace else None
                if graph is False:
                    s._gpu.use_graph = False
                if kc is not None:
                    s._gpu.check_every = kc
                for _ in range(3):  # warm-up: compile / plain run, graph capture, replay
                    x, info = s.solve(rhs, tol=tl, out=o)
                times = []
                for _ in range(reps):
                    if fresh:
                        s._gpu._last_its = 0
                    x, info = s.solve(rhs, tol=tl, out=o)
                    times.append(info["time_s"])
                if graph is False:
                    s._gpu.use_graph = True
                err = float(np.abs(s.backend.to_host(x) - u).max())
                emit(
                    {
                        "bench": "iters",
                        "backend": b,
                        "N": N,
                        "unknowns": (N - 1) ** 2,
                        "levels": s.levels,
                        "max_levels": s.max_levels,
                        "tol": tl,
                        "cuda_graph": bool(info.get("cuda_graph", False)),
                        "check_every": kc,
                        "first_chunk": (kc if fresh else "last solve's") if kc else None,
                        "inplace": inplace,
                        "graph_error": getattr(s._gpu, "_graph_error", None) if s._gpu else None,
                        "iterations": info["iterations"],
                        "solve_ms": 1e3 * min(times),
                        "solve_ms_median": 1e3 * float(np.median(times)),
                        "max_error": err,
                        "build_s": t_build,
                    }
                )
        del solvers


def part_agree(nx, ny, tol=1e-10):
    """CPU and GPU (CUDA-graph iterations) on a random variable-coefficient operator:
    the same iteration count and residual history, the same solution."""
    from forestpy.solvers import rrb

    rng = np.random.default_rng(3)
    kx = rng.uniform(0.5, 2.0, (ny, nx))
    ky = rng.uniform(0.5, 2.0, (ny, nx))
    kx[:, -1] = 0.0
    ky[-1, :] = 0.0
    c = 0.01 + kx + ky
    c[:, 1:] += kx[:, :-1]
    c[1:, :] += ky[:-1, :]
    st = (c, -kx, -ky)
    b = rng.standard_normal((ny, nx))
    gpu = rrb.RRBSolver(st, backend="gpu")
    cpu = rrb.RRBSolver(st, level=gpu.levels)  # the same factorisation (the GPU's default)
    xc, ic = cpu.solve(b, tol=tol)
    pc = cpu.precondition(b)
    pg = gpu.precondition(b)
    gpu.solve(gpu.backend.xp.asarray(b), tol=tol)  # compile; graphs are captured next
    x0 = 0.5 * xc
    xw, iw = cpu.solve(b, x0=x0, tol=1e-8)
    for _ in range(3):  # warm start: plain, capture, replay
        xg, ig = gpu.solve(gpu.backend.xp.asarray(b), x0=gpu.backend.xp.asarray(x0), tol=1e-8)
    emit(
        {
            "bench": "agree_warm_start",
            "cuda_graph": bool(ig["cuda_graph"]),
            "iterations_cpu": iw["iterations"],
            "iterations_gpu": ig["iterations"],
            "solution_rel_diff": float(
                np.abs(gpu.backend.to_host(xg) - xw).max() / np.abs(xw).max()
            ),
        }
    )
    recs = {}
    for graph in (True, False):
        gpu._gpu.use_graph = graph
        xg, ig = gpu.solve(gpu.backend.xp.asarray(b), tol=tol)
        xg = gpu.backend.to_host(xg)
        hc, hg = np.array(ic["history"]), np.array(ig["history"])
        m = min(len(hc), len(hg))
        recs[graph] = {
            "bench": "agree",
            "nx": nx,
            "ny": ny,
            "level": gpu.levels,
            "cuda_graph": bool(ig["cuda_graph"]),
            "graph_error": gpu._gpu._graph_error,
            "iterations_cpu": ic["iterations"],
            "iterations_gpu": ig["iterations"],
            "history_max_rel_diff": float(np.max(np.abs(hg[:m] - hc[:m]) / hc[:m])),
            "solution_rel_diff": float(np.abs(xg - xc).max() / np.abs(xc).max()),
            "precond_rel_diff": float(np.abs(pg - pc).max() / np.abs(pc).max()),
        }
        emit(recs[graph])
    gpu._gpu.use_graph = True
    return recs


def part_scipy(Ns, tol=1e-8):
    from forestpy.solvers import rrb
    from scipy.sparse import diags
    from scipy.sparse.linalg import LinearOperator, cg, spilu

    for N in Ns:
        st, f, u = poisson(N)
        n = N - 1
        c, e, nn = st
        A = diags(
            [c.ravel(), e.ravel()[:-1], e.ravel()[:-1], nn.ravel()[:-n], nn.ravel()[:-n]],
            [0, 1, -1, n, -n],
            format="csc",
        )
        b = f.ravel()
        for name, kw in (
            ("ilut_1e-2", dict(fill_factor=4, drop_tol=1e-2)),
            ("ilut_1e-4", dict(fill_factor=10, drop_tol=1e-4)),
        ):
            t0 = time.perf_counter()
            ilu = spilu(A, permc_spec="NATURAL", **kw)
            M = LinearOperator(A.shape, ilu.solve)
            k = [0]
            x, flag = cg(
                A,
                b,
                rtol=tol,
                M=M,
                maxiter=5000,
                callback=lambda _, k=k: k.__setitem__(0, k[0] + 1),
            )
            emit(
                {
                    "bench": "scipy",
                    "precond": name,
                    "N": N,
                    "iterations": k[0],
                    "flag": flag,
                    "time_s": time.perf_counter() - t0,
                    "nnz_factor": int(ilu.nnz),
                }
            )
        _pyamg_rows(A, b, N, tol)
        s = rrb.RRBSolver(st)
        k = [0]
        x, flag = cg(
            A,
            b,
            rtol=tol,
            M=s.aslinearoperator(),
            maxiter=5000,
            callback=lambda _, k=k: k.__setitem__(0, k[0] + 1),
        )
        emit(
            {
                "bench": "scipy",
                "precond": "rrb (as LinearOperator)",
                "N": N,
                "iterations": k[0],
                "flag": flag,
            }
        )


def _pyamg_rows(A, b, N, tol):
    """scipy CG preconditioned by one V-cycle of pyamg's smoothed-aggregation and
    Ruge-Stueben AMG (pyamg is not a dependency: a record saying so when it is not
    installed)."""
    from scipy.sparse.linalg import cg

    try:
        import pyamg
    except ImportError:
        emit({"bench": "scipy", "precond": "pyamg", "N": N, "skipped": "pyamg not installed"})
        return
    for name, build in (("pyamg_sa", pyamg.smoothed_aggregation_solver),
                        ("pyamg_rs", pyamg.ruge_stuben_solver)):
        t0 = time.perf_counter()
        ml = build(A.tocsr())
        k = [0]
        x, flag = cg(A, b, rtol=tol, M=ml.aspreconditioner(cycle="V"), maxiter=5000,
                     callback=lambda _, k=k: k.__setitem__(0, k[0] + 1))
        emit({"bench": "scipy", "precond": name, "N": N, "iterations": k[0], "flag": flag,
              "time_s": time.perf_counter() - t0, "levels": len(ml.levels),
              "pyamg": pyamg.__version__})


def _events():
    from numba import cuda

    class T:
        def __enter__(self):
            self.a, self.b = cuda.event(), cuda.event()
            self.a.record()
            return self

        def __exit__(self, *exc):
            self.b.record()
            self.b.synchronize()
            self.ms = cuda.event_elapsed_time(self.a, self.b)

    return T()


def part_copy(nbytes=1 << 30):
    import cupy

    a = cupy.random.random(nbytes // 8)
    b = cupy.empty_like(a)
    b[:] = a
    ts = []
    for _ in range(10):
        with _events() as t:
            b[:] = a
        ts.append(t.ms)
    bw = 2 * nbytes / (min(ts) * 1e-3) / 1e9
    emit({"bench": "copy", "bytes": nbytes, "ms": min(ts), "GBps": bw})
    return bw


def part_routines(N, copy_bw, reps=20):
    from forestpy.solvers import rrb
    from forestpy.solvers.rrb.gpu_kernels import TPB, _blocks, _red_blocks

    st, f, u = poisson(N)
    s = rrb.RRBSolver(st, backend="gpu")
    g = s._gpu
    k, v = g.k, g.v
    ng = v(g.nogate)  # the gate of the iteration kernels, always open here
    x, info = s.solve(s.backend.xp.asarray(f), tol=1e-8)
    n = g.h * g.w
    vec = g.vec
    nf = 2 * n

    def timeit(name, launch, words, level=1, count=reps):
        # ``count`` launches captured in one CUDA graph, replayed: device time per
        # launch as inside the solver's graphs (plain launches from Python would
        # measure the ~25 us dispatch at small sizes)
        launch()  # compile
        graph = g._capture(lambda: [launch() for _ in range(count)])
        stream = g._graph_stream()
        graph.launch(stream)
        with _events() as t:
            for _ in range(5):
                graph.launch(stream)
        ms = t.ms / (5 * count)
        bw = words * 8 / (ms * 1e-3) / 1e9
        emit(
            {
                "bench": "routine",
                "timing": f"CUDA graph of {count} launches",
                "N": N,
                "routine": name,
                "level": level,
                "ms": ms,
                "GBps": bw,
                "fraction_of_copy": bw / copy_bw,
                "bytes": int(words * 8),
            }
        )

    timeit(
        "schur_matvec+dot",
        lambda: g.matvec_dot(vec["p"], vec["q"], slot=5),
        14 * n,
    )
    # the matvec's rows per thread, with as many blocks as the rows need (several
    # waves) instead of the default single wave
    for rows in (2, 4, 8, 16):
        g.mv_rows, g._wave["matvec_dot"] = rows, 1 << 30
        timeit(f"schur_matvec+dot, {rows} rows a thread, all blocks",
               lambda: g.matvec_dot(vec["p"], vec["q"], slot=5), 14 * n)
    g.mv_rows = None
    g._wave.pop("matvec_dot")
    fl = g.flat
    timeit(
        "x, p update",
        lambda: k["update_p"][_blocks(nf), TPB, g._st](
            v(fl["p"]), v(fl["z"]), v(fl["x"]), v(g.sc), ng),
        10 * n,
    )
    p1 = g.P[0].itemsize / 8  # words of a factor entry (float32: 0.5)
    W1 = g.W[1] if len(g.P) > 1 else g.Wlast
    g.sc[1] = 1.0
    timeit(
        "r update + r2_forward",
        lambda: g.level1_forward_xr(vec["r"], vec["r_"], vec["q"], W1,
                                    g.BL[1] if len(g.P) > 1 else g.BLlast, ng),
        (6 + 4 * p1 + 1) * n,
    )
    timeit("dot", lambda: k["dot"][_red_blocks(nf, g.wave("dot")), TPB, g._st](
        v(fl["r"]), v(fl["z"]), v(g.sc), 6), 4 * n)
    timeit(
        "precondition (all levels)",
        lambda: g.precondition(vec["r"], vec["z"], slot=6),
        0,
        count=reps,
    )
    m = g.Minv.shape[0]
    timeit(
        f"dense last level ({m} rows)",
        lambda: g.dense(ng),
        g.Minv.nbytes / 8 + 3 * m,
        s.levels,
    )
    nlp = len(g.P)
    src = vec["r"]
    for lev in range(nlp):
        dst = g.W[lev + 1] if lev + 1 < nlp else g.Wlast
        bln = g.BL[lev + 1] if lev + 1 < nlp else g.BLlast
        m = src.shape[1] * src.shape[2]
        timeit(
            "r2_forward",
            lambda lev=lev, a=src, b=dst, B=bln: g.level_forward(lev, a, b, B, ng),
            (4 * g.P[lev].itemsize / 8 + 4) * m,
            lev + 1,
        )
        if lev >= 1:
            timeit(
                "black_forward",
                lambda B=g.BL[lev], a=src: g.black_step(B, a, a, ng),
                (8 * g.BL[lev].itemsize / 8 + 8) * m,
                lev + 1,
            )
            X = g.W[lev + 1] if lev + 1 < nlp else g.Xlast
            timeit(
                "r2_backward",
                lambda lev=lev, a=src, X=X: g.level_backward(lev, a, X, ng),
                (5 * g.P[lev].itemsize / 8 + 4) * m,
                lev + 1,
            )
            timeit(
                "black_backward",
                lambda B=g.BL[lev], a=src: g.black_step(B, a, a, ng, back=True),
                (8 * g.BL[lev].itemsize / 8 + 8) * m,
                lev + 1,
            )
        src = dst
    X = g.W[1] if nlp > 1 else g.Xlast
    timeit(
        "r2_backward+dot",
        lambda: g.level1_backward(vec["r"], X, vec["z"], ng, slot=6),
        (5 + 5 * p1) * n,
        1,
    )
    # more blocks than one wave (the grid-stride loop then walks fewer nodes a thread)
    wave = g.wave("r2_backward_dot")
    for mult, label in ((2, "2 waves"), (4, "4 waves"), (1 << 30, "one node a thread")):
        g._wave["r2_backward_dot"] = wave * mult
        timeit(f"r2_backward+dot, {label}",
               lambda: g.level1_backward(vec["r"], X, vec["z"], ng, slot=6), (5 + 5 * p1) * n)
    g._wave["r2_backward_dot"] = wave
    # A whole CG iteration as the solver runs it: a captured graph of 8 iterations,
    # never stopping (tol 0, no iteration limit), per iteration.
    s.solve(s.backend.xp.asarray(f), tol=1e-8)
    graph = g._capture(lambda: g._chunk(0, 8))
    if graph is not None:
        g.st[...] = s.backend.xp.asarray([0.0, 0.0, 1.0, 0.0, 1e30, 0.0, 0.0, 0.0])
        stream = g._graph_stream()
        graph.launch(stream)
        with _events() as t:
            for _ in range(reps):
                graph.launch(stream)
        emit({"bench": "routine", "N": N, "routine": "CG iteration (graph of 8)",
              "level": 0, "ms": t.ms / (8 * reps), "graph_nodes_per_iteration":
              len(graph.get_nodes()) / 8 if hasattr(graph, "get_nodes") else None})


def part_breakdown(N, tols=(1e-3, 1e-8), level=None, reps=10, pdl=True):
    """Where a GPU solve's time goes: the solve (best / median of ``reps``) with the first
    chunk as long as the last solve (``last``) or of ``check_every`` iterations
    (``fresh``), and CUDA-event times of its graphs: ``setup``, a chunk of real
    iterations (setup + chunk minus setup), a gated (no-op) iteration, ``finish``, and
    the device copies and the host read around them."""
    import cupy
    from forestpy.solvers import rrb

    st, f, u = poisson(N)
    s = rrb.RRBSolver(st, level=level, backend="gpu")
    g = s._gpu
    g.pdl = g.pdl and pdl  # programmatic graph edges (on where the device has them)
    rhs = cupy.asarray(f)
    stream = g._graph_stream()

    def us(*fns, count=20):
        # device time of the launches / copies ``fns`` (each called with no argument)
        for fn in fns:
            fn()
        with _events() as t:
            for _ in range(count):
                for fn in fns:
                    fn()
        return 1e3 * t.ms / count

    def launch(graph):
        return lambda: graph.launch(stream)

    out = cupy.zeros_like(rhs)
    for tol in tols:
        rec = {"bench": "breakdown", "N": N, "levels": s.levels, "tol": tol}
        # inplace: the same rhs and out= in every solve (read and written in place by the
        # graphs, no copies); last: rhs in place, x returned as a new array (a copy);
        # fresh: as last, the first chunk as in a solver's first solve
        for fresh, inplace in ((False, True), (False, False), (True, False)):
            o = out if inplace else None
            for _ in range(3):
                x, info = s.solve(rhs, tol=tol, out=o)
            ts = []
            for _ in range(reps):
                if fresh:
                    g._last_its = 0
                x, info = s.solve(rhs, tol=tol, out=o)
                ts.append(info["time_s"])
            name = "inplace" if inplace else ("fresh" if fresh else "last")
            rec[f"solve_ms_{name}"] = 1e3 * min(ts)
            rec[f"solve_ms_{name}_median"] = 1e3 * float(np.median(ts))
        # the whole solve as one graph (default) or as setup, chunk and finish graphs:
        # interleaved in-place solves
        ab = {True: [], False: []}
        for r in range(2 * reps * 10):
            g.one_graph = r % 2 == 0
            x, info = s.solve(rhs, tol=tol, out=out)
            ab[g.one_graph].append(1e3 * info["time_s"])
        g.one_graph = True
        for one, name in ((True, "one_graph"), (False, "three_graphs")):
            rec[f"solve_ms_inplace_{name}"] = min(ab[one])
            rec[f"solve_ms_inplace_{name}_median"] = float(np.median(ab[one]))
        its = rec["iterations"] = info["iterations"]
        rec["pdl"] = info.get("pdl", False)
        rec["pdl_error"] = g._pdl_error
        G = g._graphs
        # the setup graph the solves used (keyed by the rhs address once it read rhs in
        # place)
        setup = next(gr for key, gr in G.items() if key[:2] == ("setup", False) and gr)
        rec["setup_us"] = us(launch(setup))
        # a chunk of full iterations (the solve's first iteration skips ``update_p``:
        # the setup wrote p), captured here if the solves did not need one
        n = min(its, g.check_every)
        g._replay(("chunk", n, 0, False, False), lambda m=n: g._chunk(0, m), compiled=True)
        chunk = G.get(("chunk", n, 0, False, False))
        if chunk is not None:
            both = us(launch(setup), launch(chunk))
            rec["iteration_us"] = (both - rec["setup_us"]) / n
        gated = [(k, gr) for k, gr in G.items() if gr is not None and k[0] == "chunk"]
        if gated:
            (_, n, *_), gr = gated[0]
            g.st[0] = 1.0  # done: every kernel of the chunk returns at once
            rec["gated_iteration_us"] = us(launch(gr)) / n
        rec["finish_us"] = us(launch(G[("finish", None)]))
        rec["rhs_copy_us"] = us(partial(g.rhs_nat.__setitem__, Ellipsis, rhs))
        rec["out_copy_us"] = us(g.out_nat.copy)
        rec["state_read_us"] = us(g.stat.get)
        emit(rec)


def part_chain(N, pdl=True, reps=50, final=False):
    """Marginal device time of each kernel of one CG iteration as the solver's graphs
    run it: graphs of the iteration's first n launches (n = 1, 2, ...), with
    programmatic edges when ``pdl``, timed with CUDA events; a record a kernel.
    ``final``: the iteration predicted to be a solve's last (forward sweep with r.z)."""
    import cupy
    from forestpy.solvers import rrb

    from forestpy.cuda_device import capture_graph, programmatic_graph

    st, f, u = poisson(N)
    s = rrb.RRBSolver(st, backend="gpu")
    g = s._gpu
    rhs = cupy.asarray(f)
    for _ in range(3):  # compiled, one-wave grids known, state set up
        s.solve(rhs, tol=1e-3)
    kernels, limit, launched = g.k, [0], []

    class Counted:  # the solver's kernel table, launching only the first limit[0]
        def __init__(self, name):
            self.name = name

        def __getitem__(self, config):
            def launch(*args):
                launched.append(self.name)
                if len(launched) <= limit[0]:
                    kernels[self.name][config](*args)
            return launch

    g.k = {name: Counted(name) for name in kernels}
    # never done (tol 0; the final iteration's stopping rule only counts)
    g.st[...] = cupy.asarray([0.0, 0.0, 1.0, 0.0, 1e30, 0.0, 0.0, 0.0])
    stream = g._graph_stream()

    def iteration(numba_stream):
        g._st = numba_stream
        try:
            g._iteration(0, final=final)
        finally:
            g._st = 0

    limit[0] = 10**9
    capture_graph(iteration, stream)
    names, before = list(launched), 0.0
    for n in range(1, len(names) + 1):
        limit[0], launched[:] = n, []
        graph = capture_graph(iteration, stream)[0]
        if pdl:
            graph = programmatic_graph(graph)
        graph.launch(stream)
        with _events() as t:
            for _ in range(reps):
                graph.launch(stream)
        us = 1e3 * t.ms / reps
        emit({"bench": "chain", "N": N, "pdl": pdl, "final": final, "n": n,
              "kernel": names[n - 1],
              "us": us, "marginal_us": us - before})
        before = us
    g.k = kernels


def part_vbm(N, backend, frames=5):
    from forestpy.extensions.boussinesq import VBM

    dx = 1.0
    U = 5.0

    def path(t):
        return 0.25 * N * dx + U * t, 0.5 * N * dx, 0.0

    t0 = time.perf_counter()
    m = VBM(
        np.full((N, N), 5.0),
        dx,
        path=path,
        ship={"length": 8.0, "beam": 4.0, "p0": 0.5},
        sponge={"west": 40, "east": 40, "south": 40, "north": 40},
        backend=backend,
        tol=1e-6,
    )
    t_build = time.perf_counter() - t0
    for _ in range(3):
        m.step()
    m.timers = {"solve": 0.0, "explicit": 0.0}
    m.backend.synchronize()
    t0 = time.perf_counter()
    its = []
    for _ in range(frames):
        its.append(m.step())
    m.backend.synchronize()
    ms = 1e3 * (time.perf_counter() - t0) / frames
    emit(
        {
            "bench": "vbm",
            "backend": backend,
            "N": N,
            "unknowns": N * N,
            "frame_ms": ms,
            "solve_ms": 1e3 * m.timers["solve"] / frames,
            "explicit_ms": 1e3 * m.timers["explicit"] / frames,
            "cg_iterations": its,
            "levels": m.solver.levels,
            "build_s": t_build,
            "real_time_20fps": ms < 50.0,
        }
    )


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="agree,iters,scipy,routines,vbm")
    ap.add_argument("--gpu", action="store_true", help="also run the GPU backend")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (simulator smoke test)")
    ap.add_argument("--sizes", default=None, help="comma list of N for 'iters'")
    ap.add_argument("--cpu-max", type=int, default=2048, help="largest N on the CPU")
    ap.add_argument("--vbm", default="4096", help="comma list of N for 'vbm'")
    ap.add_argument(
        "--stop-level",
        default="default",
        help="comma list of GPU RRB stopping levels k ('default': the solver's choice)",
    )
    ap.add_argument(
        "--pdl",
        default="on",
        help="comma list of on/off: programmatic graph edges in 'breakdown' and 'chain'",
    )
    ap.add_argument(
        "--check-every",
        default="8",
        help="comma list of k: GPU iterations per graph launch / host read of the stop test",
    )
    a = ap.parse_args(argv)
    parts = set(a.parts.split(","))
    from forestpy.backend import cuda_simulator_enabled

    sim = cuda_simulator_enabled()
    Ns = [16, 32] if a.quick else [64, 128, 256, 512, 1024, 1225, 2048, 4096]
    if a.sizes:
        Ns = [int(s) for s in a.sizes.split(",")]
    if a.gpu and "agree" in parts:
        part_agree(*((13, 11) if a.quick else (1025, 769)))
    if "iters" in parts:
        for N in Ns:
            bks = (["cpu"] if N <= a.cpu_max else []) + (["gpu"] if a.gpu else [])
            if bks:
                part_iters([N], bks, check_every=[int(k) for k in a.check_every.split(",")],
                           stop_levels=[None if k == "default" else int(k)
                                        for k in a.stop_level.split(",")])
    if "scipy" in parts:
        part_scipy([16, 32] if a.quick else [64, 128, 256, 512])
    if a.gpu and not sim and "routines" in parts:
        bw = part_copy()
        for N in [1225, 4096] if not a.quick else [64]:
            part_routines(N, bw)
    if a.gpu and not sim and "breakdown" in parts:
        for N in [int(x) for x in (a.sizes or "1225,4096").split(",")]:
            for k in a.stop_level.split(","):
                for p in a.pdl.split(","):
                    part_breakdown(N, level=None if k == "default" else int(k),
                                   pdl=p == "on")
    if a.gpu and not sim and "chain" in parts:
        for N in [int(x) for x in (a.sizes or "1225").split(",")]:
            for p in a.pdl.split(","):
                for final in (False, True):
                    part_chain(N, pdl=p == "on", final=final)
    if "vbm" in parts:
        for N in [32] if a.quick else [int(s) for s in a.vbm.split(",")]:
            part_vbm(N, "gpu" if a.gpu else "cpu")


if __name__ == "__main__":
    main()
