"""The two-layer solver on triangles across MPI ranks (CPU): partition, the seed's
three-block cell layout, halo exchange overlapped with the interior edges.

**Partition** (:func:`partition_cells`): ``pymetis`` (METIS on the cell adjacency) when
it is installed, else contiguous equal pieces of the Hilbert order of the centroids
(``method="sfc"``).

**Layout** (:class:`RankLayout`, the seed's Section 6.1): a rank's local cells are, in
this order, (1) its interior cells (no neighbour on another rank), (2) its cells that
other ranks need, sorted by their lowest destination rank, then global index, (3) the
halo: the other ranks' cells next to its own, grouped by source rank, each group in
global order.  A send list per neighbour (local indices, in global order, so that they
land in the receiver's halo group in the same order) replaces the seed's reordering of
"type 1" submeshes: a cell may be in several send lists.  A rank's edges are the global
edges with at least one of its cells, **with the global orientation**: first those
without a halo cell, then those with one.  The three sides of an owned cell keep their
order.  Hence every edge is evaluated from the same two states with the same arguments
on every rank that holds it, each cell sums the same numbers in the same order, and the
global time step is a minimum: **1 rank and N ranks give bitwise the same result**.

**Step** (the seed's Algorithm 2, on the CPU): post the halo receives and sends, evaluate
the edges without a halo cell, wait, evaluate the halo edges, gather the owned cells,
``MPI_Allreduce`` (min) of the step, update the owned cells.

``backend="gpu"``: one GPU per rank (each rank uses Numba's current device; pick it
per rank, e.g. ``cuda.select_device(local_rank)``, before building the solver).  The
send cells are packed on the device and copied to the host on a copy stream while the
inner edges run on the work stream; the halo comes back the same way before the halo
edges (the streams wait on each other through events, not through the host).  The
clock is on the device as in the serial GPU solver: the cells kernel reduces the local
dt on the device, the host copies those 8 bytes back for the ``Allreduce(MIN)`` (the MPI
library need not be CUDA-aware) and writes the global dt back (8 bytes, no wait); the
device's ``k_advance`` moves ``t`` and the step count, which the update and the gauges
read.  The host waits on its GPU twice per step (the send cells, with neighbours; the
local dt) and once per depth check (every ``sync_every`` steps and at the end of a run:
a depth below ``h_min`` is found up to that many steps late, as in the serial GPU
solver).  In the CUDA simulator the same path runs as Python (tests).
"""

from __future__ import annotations

import time

import numpy as np

from . import kernels as K
from .mesh import TriMesh, hilbert_keys
from .solver import TwoLayerSolver, advance_clock, layer_fields

__all__ = ["DistributedSolver", "RankLayout", "partition_cells"]


def partition_cells(mesh: TriMesh, nparts: int, method: str = "auto") -> np.ndarray:
    """The rank of each cell: ``"metis"`` (``pymetis``), ``"sfc"`` (equal contiguous
    pieces of the Hilbert order) or ``"auto"`` (METIS if ``pymetis`` imports)."""
    if nparts < 1:
        raise ValueError(f"nparts must be >= 1, got {nparts}")
    n = mesh.num_cells
    if nparts == 1:
        return np.zeros(n, dtype=np.int64)
    if method in ("auto", "metis"):
        try:
            import pymetis
        except ImportError:
            if method == "metis":
                raise ImportError("method='metis' needs pymetis") from None
        else:
            nb = mesh.neighbours
            has = nb >= 0
            xadj = np.r_[0, np.cumsum(has.sum(axis=1))]
            graph = (pymetis.CSRAdjacency(xadj, nb[has]) if hasattr(pymetis, "CSRAdjacency")
                     else None)
            if graph is None:  # pymetis before 2025
                _, part = pymetis.part_graph(nparts, xadj=xadj, adjncy=nb[has])
            else:
                _, part = pymetis.part_graph(nparts, adjacency=graph)
            return np.asarray(part, dtype=np.int64)
    elif method != "sfc":
        raise ValueError(f"method must be 'auto', 'metis' or 'sfc', not {method!r}")
    order = np.argsort(hilbert_keys(mesh.centroid), kind="stable")
    part = np.empty(n, dtype=np.int64)
    part[order] = np.arange(n) * nparts // n
    return part


class RankLayout:
    """One rank's cells, edges and exchange lists (see the module)."""

    def __init__(self, mesh: TriMesh, part: np.ndarray, rank: int):
        part = np.asarray(part)
        self.rank = rank
        owned = part == rank
        nb = mesh.neighbours
        nbp = np.where(nb >= 0, part[np.maximum(nb, 0)], rank)
        foreign = (nbp != rank) & (nb >= 0)
        own_ids = np.flatnonzero(owned)
        is_send = foreign[own_ids].any(axis=1)
        interior = own_ids[~is_send]
        send = own_ids[is_send]
        first_dest = np.where(foreign[send], nbp[send], np.iinfo(np.int64).max).min(axis=1)
        send = send[np.lexsort((send, first_dest))]
        # halo: foreign neighbours of owned cells, by source rank, then global index
        hal = np.unique(nb[own_ids][foreign[own_ids]])
        hal = hal[np.lexsort((hal, part[hal]))]
        self.cells = np.concatenate([interior, send, hal])  # local -> global
        self.n_interior = len(interior)
        self.n_owned = len(interior) + len(send)
        g2l = np.full(mesh.num_cells, -1, dtype=np.int64)
        g2l[self.cells] = np.arange(len(self.cells))
        # exchange lists
        self.recv = {}   # source rank -> (start, stop) of its halo group
        for q in np.unique(part[hal]).tolist():
            idx = np.flatnonzero(part[hal] == q)
            self.recv[int(q)] = (self.n_owned + int(idx[0]), self.n_owned + int(idx[-1]) + 1)
        self.send = {}   # destination rank -> local indices, in global order
        for q in sorted(self.recv):
            cells_q = own_ids[(foreign[own_ids] & (nbp[own_ids] == q)).any(axis=1)]
            self.send[q] = g2l[np.sort(cells_q)]
        # edges: with at least one owned cell, global orientation kept
        ec = mesh.edge_cells
        left_own = owned[ec[:, 0]]
        right_own = (ec[:, 1] >= 0) & owned[np.maximum(ec[:, 1], 0)]
        mine = np.flatnonzero(left_own | right_own)
        touches_halo = ~(left_own[mine] & ((ec[mine, 1] < 0) | right_own[mine]))
        mine = np.concatenate([mine[~touches_halo], mine[touches_halo]])
        self.edges = mine                                  # local -> global edge
        self.n_inner_edges = int((~touches_halo).sum())
        e2l = np.full(mesh.num_edges, -1, dtype=np.int64)
        e2l[mine] = np.arange(len(mine))
        self.el = g2l[ec[mine, 0]]
        self.er = np.where(ec[mine, 1] >= 0, g2l[np.maximum(ec[mine, 1], 0)], -1)
        owned_cells = self.cells[:self.n_owned]
        self.cell_edges = e2l[mesh.cell_edges[owned_cells]]
        self.cell_side = mesh.cell_side[owned_cells]
        assert (self.el >= 0).all() and (self.cell_edges >= 0).all()


class DistributedSolver:
    """:class:`~forestpy.solvers.tworoe.solver.TwoLayerSolver`'s run across the ranks of
    ``comm`` (an ``mpi4py`` communicator, or ``None`` for one rank); every rank passes
    the same global mesh and initial fields.  ``W`` holds the rank's local cells
    (owned first, then the halo); :meth:`gather` gives the global state on rank 0."""

    def __init__(self, mesh: TriMesh, h1, h2, H, q1=None, q2=None, *, comm=None,
                 part=None, method="auto", overlap=True, **kw):
        self.backend = kw.get("backend", "cpu")
        self.overlap = bool(overlap)  # False: the seed's Algorithm 1 (exchange first)
        self.comm = comm
        rank = comm.Get_rank() if comm is not None else 0
        size = comm.Get_size() if comm is not None else 1
        self.rank, self.size = rank, size
        # the global solver checks the input and builds the global edge arrays
        glob = TwoLayerSolver(mesh, h1, h2, H, q1, q2, **kw)
        self.part = (partition_cells(mesh, size, method) if part is None
                     else np.asarray(part))
        if self.part.shape != (mesh.num_cells,) or self.part.min() < 0 \
                or self.part.max() >= size:
            raise ValueError("part must give a rank in 0..size-1 for every cell")
        lay = self.layout = RankLayout(mesh, self.part, rank)
        self.mesh, self.dtype, self.h_min = mesh, glob.dtype, glob.h_min
        self.scheme, self.g, self.r, self.gamma = glob.scheme, glob.g, glob.r, glob.gamma
        self.mass0 = glob.mass0
        self._H_global = glob.H
        self._g, self._r, self._gamma = glob._g, glob._r, glob._gamma
        self.W = np.ascontiguousarray(glob.W[:, lay.cells])
        self.H = np.ascontiguousarray(glob.H[lay.cells])
        e = lay.edges
        self._el = lay.el.astype(np.int32)
        self._er = lay.er.astype(np.int32)
        self._ebc = np.ascontiguousarray(glob._ebc[e])
        self._nx = np.ascontiguousarray(glob._nx[e])
        self._ny = np.ascontiguousarray(glob._ny[e])
        self._ln = np.ascontiguousarray(glob._ln[e])
        self._ce = lay.cell_edges.astype(np.int32)
        self._cs = np.ascontiguousarray(lay.cell_side)
        self._area = np.ascontiguousarray(glob._area[lay.cells[:lay.n_owned]])
        self._out = np.empty((K.NOUT, len(e)), dtype=self.dtype)
        self._M = np.empty((6, lay.n_owned), dtype=self.dtype)
        self._dev = None
        if self.backend == "cpu":
            self._kernels = K.cpu_kernels(glob.scheme, glob.dtype)
        self._sendbuf = {q: np.empty((6, len(ix)), dtype=self.dtype)
                         for q, ix in lay.send.items()}
        self._recvbuf = {q: np.empty((6, b - a), dtype=self.dtype)
                         for q, (a, b) in lay.recv.items()}
        if self.backend == "gpu":
            self._dev = _DeviceRank(self, glob.scheme, glob._sync_every)
        self.t = 0.0
        self.steps = 0
        self.wall_seconds = 0.0
        self.exchange_seconds = 0.0
        self.gauges = None

    # --- one step -------------------------------------------------------------------

    def _post(self):
        reqs = []
        lay = self.layout
        for q, buf in self._recvbuf.items():
            reqs.append(self.comm.Irecv(buf, source=q, tag=33))
        for q, ix in lay.send.items():
            np.take(self.W, ix, axis=1, out=self._sendbuf[q])
            reqs.append(self.comm.Isend(self._sendbuf[q], dest=q, tag=33))
        return reqs

    def _finish(self, reqs):
        from mpi4py import MPI

        t0 = time.perf_counter()
        MPI.Request.Waitall(reqs)
        self.exchange_seconds += time.perf_counter() - t0
        for q, (a, b) in self.layout.recv.items():
            self.W[:, a:b] = self._recvbuf[q]

    def _exchange_host(self, reqs_ready=None):
        """Post the halo messages from the host send buffers, wait, return."""
        reqs = []
        for q, buf in self._recvbuf.items():
            reqs.append(self.comm.Irecv(buf, source=q, tag=33))
        for q in self.layout.send:
            reqs.append(self.comm.Isend(self._sendbuf[q], dest=q, tag=33))
        from mpi4py import MPI

        t0 = time.perf_counter()
        MPI.Request.Waitall(reqs)
        self.exchange_seconds += time.perf_counter() - t0

    def _global_dt(self, dt, t_end):
        if self.comm is not None:
            from mpi4py import MPI

            dt = self.comm.allreduce(dt, op=MPI.MIN)
        dt, self.t = advance_clock(self.t, dt, t_end)
        return dt

    def _check(self, hmin):
        self.steps += 1
        self._check_depth(hmin)

    def _check_depth(self, hmin):
        bad = not (hmin >= self.h_min)
        if self.comm is not None:
            from mpi4py import MPI

            bad = self.comm.allreduce(bad, op=MPI.LOR)
        if bad:
            from .solver import DepthError

            raise DepthError(f"a layer depth fell below h_min = {self.h_min:g} by step "
                             f"{self.steps} (t = {self.t:.6g}); wet/dry fronts are not "
                             f"handled by this solver")

    def step(self, t_end: float = np.inf) -> float:
        if self._dev is not None:
            return self._dev.step(t_end)
        edges, cells, update = self._kernels
        lay = self.layout
        args = (self.W, self.H, self._el, self._er, self._ebc, self._nx, self._ny,
                self._ln, self._g, self._r, self._out)
        reqs = self._post() if self.comm is not None and lay.recv else None
        if reqs is not None and not self.overlap:
            self._finish(reqs)
            reqs = None
        edges(*args, 0, lay.n_inner_edges)       # overlaps the messages
        if reqs is not None:
            self._finish(reqs)
        edges(*args, lay.n_inner_edges, len(self._el))
        dt = float(cells(self._out, self._ce, self._cs, self._area, self._gamma, self._M))
        dt = self._global_dt(dt, t_end)
        self._check(update(self.W, self._M, self._area, dt))
        if self.gauges is not None:
            self.gauges.record(self.W, self.t)
        return dt

    def add_gauges(self, points):
        """Gauges at ``points`` (as :meth:`TwoLayerSolver.add_gauges`), each sampled by
        the rank owning its cell; every rank passes the same points (collective only in
        :meth:`~forestpy.solvers.tworoe.gauges.TriangleGauges.write`)."""
        from .gauges import TriangleGauges

        if self.gauges is not None:
            raise RuntimeError("this solver has its gauges already (one set per solver)")
        self.sync()
        self.gauges = TriangleGauges(self, points)
        return self.gauges

    def run(self, t_final: float) -> dict:
        t0 = time.perf_counter()
        while self.t < t_final:
            self.step(t_final)
        self.wall_seconds += time.perf_counter() - t0
        return {"t": self.t, "steps": self.steps, "ranks": self.size,
                "owned_cells": self.layout.n_owned, "wall_seconds": self.wall_seconds,
                "exchange_wait_seconds": self.exchange_seconds}

    def save_checkpoint(self, path):
        """Gather the state to rank 0, which writes it (collective); the file restarts
        on any number of ranks (:meth:`from_checkpoint`) or serially."""
        from .checkpoint import write_checkpoint

        W = self.gather()
        if self.rank == 0:
            write_checkpoint(path, self, W=W, H=self._H_global)
        if self.comm is not None:
            self.comm.Barrier()
        return path

    @classmethod
    def from_checkpoint(cls, path, mesh: TriMesh, **kw) -> DistributedSolver:
        """Continue a saved run (serial or distributed, any rank count) on the ranks of
        ``kw["comm"]``; ``kw``: ``comm``, ``part``, ``method``, ``overlap``, ``bc``,
        ``backend``."""
        from .checkpoint import read_checkpoint

        c = read_checkpoint(path, mesh)
        sim = cls(mesh, **TwoLayerSolver._checkpoint_args(c), **kw)
        sim.t, sim.steps, sim.mass0 = float(c["t"]), int(c["steps"]), c["mass0"]
        return sim

    @property
    def owned_cells(self) -> np.ndarray:
        """The global indices of the rank's own cells, in local order."""
        return self.layout.cells[:self.layout.n_owned]

    def masses(self) -> tuple[float, float]:
        """Volume of each layer over all ranks (FP64; collective)."""
        self.sync()
        n = self.layout.n_owned
        a = self.mesh.area[self.owned_cells]
        m = np.array([np.dot(a, self.W[0, :n].astype(np.float64)),
                      np.dot(a, self.W[3, :n].astype(np.float64))])
        if self.comm is not None:
            from mpi4py import MPI

            m = self.comm.allreduce(m, op=MPI.SUM)
        return float(m[0]), float(m[1])

    def prepare(self):
        """Nothing to do: the device arrays are made with the solver (the serial
        solver's interface)."""

    def sync(self):
        """Copy the rank's GPU state to ``W`` (no-op on the CPU)."""
        if self._dev is not None:
            self.W = self._dev.W.copy_to_host()

    def fields(self) -> dict:
        """The output fields (:func:`~forestpy.solvers.tworoe.solver.layer_fields`) of
        the rank's own cells, in local order (global indices ``layout.cells[:n_owned]``);
        not collective."""
        self.sync()
        n = self.layout.n_owned
        return layer_fields(self.W[:, :n], self.H[:n])

    def gather(self):
        """The global state ``(6, cells)`` on rank 0 (``None`` elsewhere); collective."""
        self.sync()
        lay = self.layout
        mine = (lay.cells[:lay.n_owned], self.W[:, :lay.n_owned])
        parts = [mine] if self.comm is None else self.comm.gather(mine, root=0)
        if self.rank != 0:
            return None
        W = np.empty((6, self.mesh.num_cells), dtype=self.dtype)
        for ids, w in parts:
            W[:, ids] = w
        return W


class _DeviceRank:
    """A rank's arrays on its GPU and the step of the seed's Algorithm 2 with the clock
    on the device (see the module): the send cells packed and copied to the host on a
    copy stream while the inner edges run on the work stream; the messages; the halo
    copied in and unpacked; the halo edges; the cells (the local dt, a block minimum
    and an atomic minimum on the device); the local dt to the host and
    ``Allreduce(MIN)``; the global dt back to ``ctl``; the device's ``k_advance`` (the
    clock: ``T``, ``DT``, ``STEPS``); the update; the gauges.  The streams are ordered
    by events, not by the host.

    Host synchronisations per step: (1) with neighbours, the copy stream once the send
    cells are on the host (the MPI library need not be CUDA-aware), then the messages;
    (2) the work stream once the local dt (8 bytes) is on the host, for the
    ``Allreduce``.  Host-to-device copies (no wait): the received halo, the global dt
    (8 bytes).  Every ``check_every`` steps and at ``t_end``: the smallest depth since
    the last check (8 bytes) and an ``Allreduce(LOR)`` of the depth check."""

    def __init__(self, ds: DistributedSolver, scheme: str, check_every: int = 16):
        from numba import cuda

        from .gpu import DTMIN, HMIN, STEPS, TEND, TPB, T, gpu_kernels, sample_kernel

        self.ds = ds
        self.tpb = TPB
        self.T, self.DTMIN, self.TEND, self.STEPS, self.HMIN = T, DTMIN, TEND, STEPS, HMIN
        self.k = gpu_kernels(scheme, ds.dtype)
        dev = cuda.to_device
        self.W, self.H = dev(ds.W), dev(ds.H)
        self.el, self.er, self.ebc = dev(ds._el), dev(ds._er), dev(ds._ebc)
        self.nx, self.ny, self.ln = dev(ds._nx), dev(ds._ny), dev(ds._ln)
        self.ce, self.cs, self.area = dev(ds._ce), dev(ds._cs), dev(ds._area)
        self.out = cuda.device_array(ds._out.shape, dtype=ds.dtype)
        self.M = cuda.device_array(ds._M.shape, dtype=ds.dtype)
        self.ctl = dev(np.array([0.0, 0.0, np.inf, np.inf, 0.0, np.inf]))
        self._clock = None  # (t, steps, t_end) the device holds; None: not written yet
        self._one = cuda.pinned_array(1, dtype=np.float64)   # the local dt, hmin
        self._gdt = cuda.pinned_array(1, dtype=np.float64)   # the global dt
        self.check_every = max(1, int(check_every))
        self.host_syncs = 0  # waits of the host on a stream (tests count them)
        lay = ds.layout
        self.send_idx = {q: dev(ix.astype(np.int32)) for q, ix in lay.send.items()}
        self.send_dev = {q: cuda.device_array(b.shape, dtype=ds.dtype)
                         for q, b in ds._sendbuf.items()}
        self.recv_dev = {q: cuda.device_array(b.shape, dtype=ds.dtype)
                         for q, b in ds._recvbuf.items()}
        self.copy = cuda.stream()
        self.work = cuda.stream()
        self.updated = cuda.event()  # on work: the step's update is done
        self.halo_in = cuda.event()  # on copy: the halo is unpacked
        self.sample = sample_kernel()
        self.gcells = None

    def _grid(self, n):
        return max(1, (n + self.tpb - 1) // self.tpb)

    def _sync(self, stream):
        stream.synchronize()
        self.host_syncs += 1

    def _write_clock(self, t_end):
        """Give the device the host's clock (first step, a restart, a new ``t_end``)."""
        ds = self.ds
        if self._clock == (ds.t, ds.steps, t_end):
            return
        self._sync(self.work)  # the update before reads ctl: overwrite it only now
        c = self.ctl.copy_to_host()
        c[self.T], c[self.STEPS], c[self.TEND] = ds.t, float(ds.steps), t_end
        self.ctl.copy_to_device(c, stream=self.work)
        self._clock = (ds.t, ds.steps, t_end)

    def step(self, t_end):
        ds = self.ds
        lay = ds.layout
        ke, kc, ka, ku, kp, kq = self.k
        tpb = self.tpb
        self._write_clock(t_end)
        exchange = ds.comm is not None and bool(lay.recv)
        if exchange:  # after the previous update: packed on the copy stream
            self.updated.wait(self.copy)
            for q, idx in self.send_idx.items():
                kp[self._grid(len(idx)), tpb, self.copy](self.W, idx, self.send_dev[q])
                self.send_dev[q].copy_to_host(ds._sendbuf[q], stream=self.copy)
        args = (self.W, self.H, self.el, self.er, self.ebc, self.nx, self.ny, self.ln,
                ds._g, ds._r, self.out, self.ctl)
        ni, ne = lay.n_inner_edges, len(ds._el)
        if ni and ds.overlap:
            ke[self._grid(ni), tpb, self.work](*args, 0, ni)  # meanwhile: the messages
        if exchange:
            self._sync(self.copy)  # (1) the send cells on the host
            ds._exchange_host()
            for q, (a, b) in lay.recv.items():
                self.recv_dev[q].copy_to_device(ds._recvbuf[q], stream=self.copy)
                kq[self._grid(b - a), tpb, self.copy](self.W, a, self.recv_dev[q])
            self.halo_in.record(self.copy)
            self.halo_in.wait(self.work)
        if ni and not ds.overlap:
            ke[self._grid(ni), tpb, self.work](*args, 0, ni)
        if ne > ni:
            ke[self._grid(ne - ni), tpb, self.work](*args, ni, ne)
        kc[self._grid(lay.n_owned), tpb, self.work](self.out, self.ce, self.cs, self.area,
                                                    ds._gamma, self.M, self.ctl)
        d = self.DTMIN
        self.ctl[d:d + 1].copy_to_host(self._one, stream=self.work)
        self._sync(self.work)  # (2) the local dt on the host
        gdt = float(self._one[0])
        if ds.comm is not None:
            from mpi4py import MPI

            gdt = ds.comm.allreduce(gdt, op=MPI.MIN)
        dt, t = advance_clock(ds.t, gdt, t_end)  # the device's k_advance does the same
        self._gdt[0] = gdt
        self.ctl[d:d + 1].copy_to_device(self._gdt, stream=self.work)
        ka[1, 1, self.work](self.ctl)
        ku[self._grid(lay.n_owned), tpb, self.work](self.W, self.M, self.area, self.ctl)
        g = ds.gauges
        if g is not None and len(g.local):
            buf, times, _ = g.device_buffers(ds.steps + 2 - g.base)
            if self.gcells is None:
                from numba import cuda

                self.gcells = cuda.to_device(g.local)
            self.sample[self._grid(len(g.local)), tpb, self.work](
                self.W, self.gcells, buf, times, self.ctl, g.base)
            g.device_rows(ds.steps + 2 - g.base)
        self.updated.record(self.work)
        ds.t = t
        ds.steps += 1
        self._clock = (ds.t, ds.steps, t_end)
        if ds.steps % self.check_every == 0 or t >= t_end:
            self.check_depth()
        return dt

    def check_depth(self):
        """The smallest depth since the last check to the host, the check on every
        rank (collective), the minimum reset."""
        h = self.HMIN
        self.ctl[h:h + 1].copy_to_host(self._one, stream=self.work)
        self._sync(self.work)
        hmin = float(self._one[0])
        self._gdt[0] = np.inf
        self.ctl[h:h + 1].copy_to_device(self._gdt, stream=self.work)
        self.ds._check_depth(hmin)
