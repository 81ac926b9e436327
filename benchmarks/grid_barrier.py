"""Cost of a grid-wide barrier inside one persistent kernel against a kernel boundary in
a CUDA graph (GPU only).  One JSON record a line:

* ``numba grid.sync`` / ``atomic barrier``: per barrier, Numba's cooperative-groups
  grid sync and a hand-written one (an atomic counter), one or two blocks per SM;
* ``exchange step ...``: one dependent step (every thread reads what another block
  wrote in the step before) separated by either barrier, or as separate kernels in a
  CUDA graph (gate read first, or only before the store);
* ``gated-off kernel in graph``: the bare cost of a graph kernel that returns at once.

It answers whether the RRB preconditioner's ~25 dependent level steps per CG iteration
would be cheaper inside one persistent kernel (docs/rrb.md, "Performance" and "Tried
and not kept").

Usage::

    python benchmarks/grid_barrier.py
"""
import json
import time
from functools import partial

import numpy as np
from numba import cuda

from forestpy.cuda_device import capture_graph


def emit(**r):
    print(json.dumps(r), flush=True)


@cuda.jit
def k_sync(n):
    g = cuda.cg.this_grid()
    for _ in range(n):
        g.sync()


@cuda.jit(device=True)
def bar(cnt, target):
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        cuda.threadfence()
        cuda.atomic.add(cnt, 0, 1)
        while cuda.atomic.add(cnt, 0, 0) < target:
            pass
        cuda.threadfence()
    cuda.syncthreads()


@cuda.jit
def k_bar(n, cnt):
    nb = cuda.gridDim.x
    for s in range(n):
        bar(cnt, (s + 1) * nb)


@cuda.jit(device=True)
def exchange(src, dst, m):
    # one dependent step: each thread reads values another block wrote (4099 apart)
    k = cuda.grid(1)
    nt = cuda.gridsize(1)
    while k < m:
        dst[k] = 0.5 * src[(k + 4099) % m] + 1.0
        k += nt


@cuda.jit
def k_exchange_sync(a, b, n, m):
    g = cuda.cg.this_grid()
    for s in range(n):
        if s % 2 == 0:
            exchange(a, b, m)
        else:
            exchange(b, a, m)
        g.sync()


@cuda.jit
def k_exchange_bar(a, b, n, m, cnt):
    nb = cuda.gridDim.x
    for s in range(n):
        if s % 2 == 0:
            exchange(a, b, m)
        else:
            exchange(b, a, m)
        bar(cnt, (s + 1) * nb)


@cuda.jit
def k_step(src, dst, m, g):
    if g[0] != 0.0:
        return
    exchange(src, dst, m)


@cuda.jit
def k_step_late_gate(src, dst, m, g):
    k = cuda.grid(1)
    nt = cuda.gridsize(1)
    gv = g[0]
    while k < m:
        v = 0.5 * src[(k + 4099) % m] + 1.0
        if gv == 0.0:
            dst[k] = v
        k += nt


def timed(fn, *args, reps=5):
    """Best wall time of ``fn(*args)`` (synchronised), after one warm-up call."""
    fn(*args)
    cuda.synchronize()
    best = 1e9
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(*args)
        cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def launch_sync(nb, tpb, n):
    k_sync[nb, tpb](n)


def launch_bar(nb, tpb, n, cnt):
    cnt.copy_to_device(np.zeros(1, np.int32))
    k_bar[nb, tpb](n, cnt)


def launch_exchange_sync(nb, tpb, a, b, n, m):
    k_exchange_sync[nb, tpb](a, b, n, m)


def launch_exchange_bar(nb, tpb, a, b, n, m, cnt):
    cnt.copy_to_device(np.zeros(1, np.int32))
    k_exchange_bar[nb, tpb](a, b, n, m, cnt)


def step_chain(kern, nbk, tpb, a, b, m, g, steps, st):
    for s in range(steps):
        src, dst = (a, b) if s % 2 == 0 else (b, a)
        kern[nbk, tpb, st](src, dst, m, g)


def replay(graph, stream):
    graph.launch(stream)
    stream.synchronize()


def graph_time(kern, nbk, tpb, a, b, m, g, steps=200):
    """Per kernel: a CUDA graph of ``steps`` dependent launches of ``kern``."""
    chain = partial(step_chain, kern, nbk, tpb, a, b, m, g, steps)
    chain(0)
    cuda.synchronize()
    graph, stream = capture_graph(chain)
    return timed(replay, graph, stream) / steps


def main():
    dev = cuda.get_current_device()
    sms = dev.MULTIPROCESSOR_COUNT
    emit(device=str(dev.name), sms=sms)
    tpb = 256
    cnt = cuda.to_device(np.zeros(1, np.int32))
    for nb in (sms, 2 * sms):
        for n in (1000, 5000):
            t = timed(launch_sync, nb, tpb, n)
            emit(probe="numba grid.sync", blocks=nb, n=n, us_per=t / n * 1e6)
            t = timed(launch_bar, nb, tpb, n, cnt)
            emit(probe="atomic barrier", blocks=nb, n=n, us_per=t / n * 1e6)
    n = 1000
    for m in (4096, 65536, 400000):
        a = cuda.to_device(np.ones(m))
        b = cuda.to_device(np.ones(m))
        nb = min(2 * sms, max(1, -(-m // tpb)))
        t = timed(launch_exchange_sync, nb, tpb, a, b, n, m)
        emit(probe="exchange step + grid.sync", m=m, blocks=nb, us_per=t / n * 1e6)
        t = timed(launch_exchange_bar, nb, tpb, a, b, n, m, cnt)
        emit(probe="exchange step + atomic barrier", m=m, blocks=nb, us_per=t / n * 1e6)
        nbk = max(1, -(-m // tpb))
        g = cuda.to_device(np.zeros(1))
        for name, kern in (("early gate", k_step), ("late gate", k_step_late_gate)):
            emit(probe=f"exchange step as graph kernels ({name})", m=m, blocks=nbk,
                 us_per=graph_time(kern, nbk, tpb, a, b, m, g) * 1e6)
        closed = cuda.to_device(np.ones(1))
        emit(probe="gated-off kernel in graph", m=m,
             us_per=graph_time(k_step, nbk, tpb, a, b, m, closed) * 1e6)


if __name__ == "__main__":
    main()
