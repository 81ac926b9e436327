"""What the ranks exchange: :class:`Exchange` (one rank) and :class:`MPIExchange`.

A serial run is a distributed run on one rank: :class:`Exchange` has nothing to send
(the halo exchanges do nothing, a reduction returns its argument, a gather the rows
given), so the one step, ghost fill and regrid of :class:`~forestpy.Simulation` run
unchanged on it.  :class:`MPIExchange` (mpi4py, imported on first use) moves the halo
(boundary strips of the patches that the owned ghost cells read, non-blocking, in a
posted and a completed half so that the step overlaps them with work), the edge fluxes
of remote fine patches, the patches a regrid migrates, and does the reductions and
gathers (Courant number and state checks, tagging flags, per-patch totals, samples,
the state to one rank).

This module imports the core only (no driver): the driver imports it.
"""

from __future__ import annotations

import contextlib
import math
from contextvars import ContextVar
from types import SimpleNamespace

import numpy as np

__all__ = ["BUILD_COMM", "Exchange", "MPIExchange", "world"]

# Set by forestpy.parallel.build_distributed: a Simulation (exactly this class) built
# meanwhile is distributed over this communicator's ranks from its initial refinement.
BUILD_COMM: ContextVar = ContextVar("forestpy_build_comm", default=None)


def world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


class Exchange:
    """One rank: no messages.  The counters stay zero."""

    distributed = False
    comm = None
    rank, nranks = 0, 1

    def __init__(self):
        self.bytes = 0  # bytes sent by halo and edge exchanges and migrations
        self.gathers = 0  # whole-state gathers (to every rank, or to one)
        self.migrated = 0  # old patches received by their new owners, over all regrids

    # the halves of a halo exchange (the step overlaps work between them)
    def post(self, arr, plan, timers, send_arr=None):
        return None

    def complete(self, arr, plan, pending, timers) -> None:
        pass

    def halo(self, arr, plan, timers, send_arr=None) -> None:
        """Receive the rows ``plan.recv`` of ``arr`` from their owners, sending ours
        (rows ``plan.send`` of ``send_arr``, default ``arr``)."""

    # reductions and gathers
    def allreduce(self, values: np.ndarray, op: str) -> np.ndarray:
        return values

    def allgather(self, obj) -> list:
        return [obj]

    def allgather_rows(self, mine: np.ndarray, offsets) -> np.ndarray:
        """Every rank's rows (``offsets``: where each rank's start), in rank order."""
        return mine

    def gather_rows(self, mine, offsets, root: int):
        """:meth:`allgather_rows` on rank ``root`` only (None elsewhere)."""
        return mine

    def bcast(self, obj, root: int = 0):
        return obj

    def barrier(self) -> None:
        pass

    def reduce_status(self, local: np.ndarray, check_state: bool) -> np.ndarray:
        """The step status ``[Courant number, sum, min of each positive field]`` over
        the ranks (here: as it is)."""
        return local

    def raise_first(self, error: Exception | None, kind: type) -> None:
        """Raise on every rank a ``kind`` error with the first rank's message of
        ``error`` (here: ``error`` itself)."""
        if error is not None:
            raise error

    def share_outcome(self, out, error: Exception | None, what: str):
        """Rank 0's result of ``what`` (or its error) on every rank."""
        if error is not None:
            raise error
        return out

    @staticmethod
    def side_stream(backend):
        return SideStream(False)


class MPIExchange(Exchange):
    """The ranks of ``comm`` (default COMM_WORLD); ``backend``: where the arrays live
    (device arrays are staged through pinned host buffers on a copy stream)."""

    distributed = True

    def __init__(self, comm, backend):
        super().__init__()
        self.comm = comm if comm is not None else world()
        self.rank, self.nranks = self.comm.rank, self.comm.size
        self.backend = backend
        self._copy_stream = None
        self._staging = None

    # ------------------------------------------------------------------ schedules
    def schedule(self, needed, owner, rows, lo, backend):
        """Who sends which rows to whom: ``needed`` global ids this rank receives,
        stored at rows ``rows[id]``; the ids asked of this rank are sent from its owned
        rows (``id - lo``: owned patches come first in every local array); one
        all-to-all of id lists."""
        return self.schedules([(needed, rows)], owner, lo, backend)[0][0]

    def schedules(self, wanted, owner, lo, backend, share=None):
        """:meth:`schedule` of each ``(needed, rows)`` of ``wanted`` and, with
        ``share`` (any picklable value), every rank's ``share`` (an allgather), all in
        one all-to-all (each collective waits for the slowest rank, and on an
        oversubscribed host costs a scheduler round trip).  Returns (the schedules, the
        list of the ranks' shares in rank order, or None)."""
        comm, n = self.comm, self.nranks
        want = [[] for _ in range(n)]
        for needed, _ in wanted:
            src = owner[needed]
            for r in range(n):
                want[r].append(needed[src == r])
        got = comm.alltoall([(w, share) for w in want])
        plans = []
        for i, (_, rows) in enumerate(wanted):
            recv = {r: rows[want[r][i]] for r in range(n) if len(want[r][i])}
            send = {r: got[r][0][i].astype(np.int64) - lo for r in range(n)
                    if len(got[r][0][i])}
            plans.append(SimpleNamespace(
                recv=recv, send=send,
                recv_dev={r: backend.to_device(v) for r, v in recv.items()},
                send_dev={r: backend.to_device(v) for r, v in send.items()},
                cells=None))
        return plans, None if share is None else [g[1] for g in got]

    @staticmethod
    def strip_mask(shape, triplets, owned):
        """This rank's part of the boundary strips (see :meth:`use_strips`): a uint8 mask
        over the cells of a padded patch of ``shape``, 1 at the cells that its ghost
        fill or time sync reads from a remote patch (``triplets``: ``(..., 3)`` arrays
        of (global patch, j, i), or ``(..., 4)`` blocks of the ghost plan, 4 cells each;
        ``owned(ids)``: which patches this rank owns)."""
        ny, nx = shape
        mask = np.zeros(ny * nx, dtype=np.uint8)
        for t in triplets:
            t = np.asarray(t)
            t = t.reshape(-1, t.shape[-1]).astype(np.int64)
            t = t[~owned(t[:, 0])]
            step = t[:, 3] if t.shape[1] == 4 else 0
            for a, b in ((0, 0), (0, 1), (1, 0), (1, 1)):  # a block's 4 cells
                mask[(t[:, 1] + a * step) * nx + t[:, 2] + b * step] = 1
        return mask

    @staticmethod
    def use_strips(plan, both, num_eqn, backend, strip_fraction) -> None:
        """The halo exchange moves boundary strips, not whole patches: the cells set in
        ``both`` (the union over all ranks of :meth:`strip_mask`: the same cell set for
        every patch, a ring along its sides).  ``plan.cells`` (flat indices into a
        padded patch) stays None when the ring would hold most of the patch anyway."""
        cells = np.flatnonzero(both)
        if len(cells) > strip_fraction * both.size:
            return
        plan.cells = cells
        plan.cells_dev = backend.to_device(cells)
        plan.eq_dev = backend.to_device(np.arange(num_eqn))

    # ------------------------------------------------------------------ halo
    def halo(self, arr, plan, timers, send_arr=None) -> None:
        """Receive the rows ``plan.recv`` of ``arr`` from their owners, sending ours
        (rows ``plan.send`` of ``send_arr``, default ``arr``); packed into contiguous
        host buffers (staged from the device on the GPU backend), non-blocking."""
        with timers("exchange"):
            self.complete(arr, plan, self.post(arr, plan, timers, send_arr), timers)

    def post(self, arr, plan, timers, send_arr=None):
        """Post the receives and pack the rows to send; on the CPU the sends go out now,
        on a GPU the packed rows are staged to pinned host buffers on a copy stream
        (they travel while the early patches' kernel runs) and :meth:`complete` sends
        them.  Returns what :meth:`complete` needs."""
        be, comm = self.backend, self.comm
        send_arr = arr if send_arr is None else send_arr
        cells = getattr(plan, "cells", None)
        shape = arr.shape[1:] if cells is None else (arr.shape[1], len(cells))
        staged = be.is_gpu and not be.simulator
        reqs, bufs = [], {}
        for r, ids in plan.recv.items():
            bufs[r] = self._host_buffer((len(ids),) + shape, arr.dtype, staged)
            reqs.append(comm.Irecv(bufs[r], source=r, tag=7))
        with timers("exchange.pack"):
            if staged:
                packed = self._stage(send_arr, plan)
            else:
                packed = {r: np.ascontiguousarray(be.to_host(self._pack(send_arr, plan, r)))
                          for r in plan.send}
        pending = SimpleNamespace(reqs=reqs, bufs=bufs, packed=packed, sent=False)
        if not staged:
            self._send(pending)
        return pending

    @staticmethod
    def _pack(arr, plan, r):
        """The rows sent to rank ``r`` (only ``plan.cells`` of each when set)."""
        rows = arr[plan.send_dev[r]]
        if getattr(plan, "cells", None) is None:
            return rows
        n, m, ny, nx = rows.shape
        return rows.reshape(n, m, ny * nx)[:, :, plan.cells_dev]

    def _send(self, pending) -> None:
        for r, buf in pending.packed.items():
            pending.reqs.append(self.comm.Isend(buf, dest=r, tag=7))
            self.bytes += buf.nbytes
        pending.sent = True

    @staticmethod
    def _host_buffer(shape, dtype, pinned):
        if not pinned:
            return np.empty(shape, dtype=dtype)
        import cupyx

        return cupyx.empty_pinned(shape, dtype=dtype)

    def _stage(self, send_arr, plan) -> dict:
        """Gather the rows to send on the device (current stream), then copy them to
        pinned host buffers on a non-blocking copy stream (returns at once)."""
        import cupy

        if self._copy_stream is None:
            self._copy_stream = cupy.cuda.Stream(non_blocking=True)
        stream = self._copy_stream
        dev = {r: self._pack(send_arr, plan, r) for r in plan.send}
        ready = cupy.cuda.Event()
        ready.record()
        stream.wait_event(ready)
        packed = {}
        for r, d in dev.items():
            packed[r] = self._host_buffer(d.shape, d.dtype, True)
            d.get(stream=stream, out=packed[r], blocking=False)
            self.backend.host_transfers += 1
        self._staging = dev  # alive until the copies are done
        return packed

    def complete(self, arr, plan, pending, timers) -> None:
        """Send what :meth:`post` staged, wait for every message, and unpack the
        received rows into ``arr``."""
        from mpi4py import MPI

        be = self.backend
        with timers("exchange.wait"):
            if not pending.sent:
                self._copy_stream.synchronize()
                self._staging = None
                self._send(pending)
            MPI.Request.Waitall(pending.reqs)
        with timers("exchange.unpack"):
            cells = getattr(plan, "cells", None)
            flat = None
            if cells is not None:
                if not arr.flags.c_contiguous:
                    raise RuntimeError("halo strips need a C-contiguous state array")
                flat = arr.reshape(arr.shape[0], arr.shape[1], arr.shape[2] * arr.shape[3])
            for r in plan.recv:
                buf = be.to_device(pending.bufs[r], arr.dtype)
                if flat is None:
                    arr[plan.recv_dev[r]] = buf
                else:  # a view of arr: the strips go into the halo rows in place
                    flat[plan.recv_dev[r][:, None, None], plan.eq_dev[None, :, None],
                         plan.cells_dev[None, None, :]] = buf

    # ------------------------------------------------------------------ reductions
    def allreduce(self, values: np.ndarray, op: str) -> np.ndarray:
        from mpi4py import MPI

        out = np.empty_like(values)
        self.comm.Allreduce(values, out, op={"max": MPI.MAX, "sum": MPI.SUM}[op])
        return out

    def allgather(self, obj) -> list:
        return self.comm.allgather(obj)

    def allgather_rows(self, mine: np.ndarray, offsets) -> np.ndarray:
        flags = mine.dtype == np.bool_  # sent as bytes
        mine = np.ascontiguousarray(mine.astype(np.uint8) if flags else mine)
        out = np.empty((int(offsets[-1]),) + mine.shape[1:], dtype=mine.dtype)
        row = int(np.prod(mine.shape[1:]))
        if row:
            self.comm.Allgatherv(mine, [out, np.diff(offsets) * row, offsets[:-1] * row, None])
        return out.astype(bool) if flags else out

    def gather_rows(self, mine, offsets, root: int):
        row = int(np.prod(mine.shape[1:]))
        full = recv = None
        if self.rank == root:
            full = np.empty((int(offsets[-1]),) + mine.shape[1:], dtype=mine.dtype)
            recv = [full, np.diff(offsets) * row, offsets[:-1] * row, None]
        if row:
            self.comm.Gatherv(np.ascontiguousarray(mine), recv, root=root)
        return full

    def bcast(self, obj, root: int = 0):
        return self.comm.bcast(obj, root=root)

    def barrier(self) -> None:
        self.comm.Barrier()

    def reduce_status(self, local: np.ndarray, check_state: bool) -> np.ndarray:
        """[max Courant, sum of the interiors, min of each positive field] over ranks;
        non-finite values become +inf (Courant) or -inf (minima) before the reduction."""
        local = np.asarray(local, dtype=np.float64)
        c = local[0] if math.isfinite(local[0]) else math.inf
        if not check_state:
            return self.allreduce(np.array([c]), "max")
        lows = np.where(np.isfinite(local[2:]) | (local[2:] == math.inf), local[2:], -math.inf)
        mx = self.allreduce(np.concatenate([[c], -lows]), "max")
        total = self.allreduce(local[1:2].copy(), "sum")
        return np.concatenate([mx[:1], total, -mx[1:]])

    def raise_first(self, error: Exception | None, kind: type) -> None:
        msgs = [m for m in self.comm.allgather(
            None if error is None else f"rank {self.rank}: {error}") if m]
        if msgs:
            raise kind(msgs[0])

    def share_outcome(self, out, error: Exception | None, what: str):
        out, message = self.comm.bcast(
            (out, None if error is None else f"{type(error).__name__}: {error}"), root=0)
        if error is not None:
            raise error
        if message is not None:
            raise RuntimeError(f"rank 0 could not {what}: {message}")
        return out

    @staticmethod
    def side_stream(backend):
        return SideStream(backend.is_gpu and not backend.simulator)


class SideStream:
    """A second CUDA stream whose work is ordered with the default stream's by events:
    ``follow_default()`` makes it wait for the default stream's work queued so far,
    ``active()`` sends CuPy work and forestpy's patch kernels to it, ``join_default()``
    makes the default stream wait for its work queued so far.  With ``real`` False
    (CPU, CUDA simulator) all three do nothing and the work stays in order."""

    def __init__(self, real: bool):
        self.stream = None
        if real:
            import cupy

            from forestpy.cuda_device import priority_stream

            self.stream = priority_stream()
            self._after_default = cupy.cuda.Event(disable_timing=True)
            self._after_side = cupy.cuda.Event(disable_timing=True)

    def follow_default(self) -> None:
        if self.stream is not None:
            self._after_default.record()  # on the current stream: the default one
            self.stream.wait_event(self._after_default)

    def active(self):
        if self.stream is None:
            return contextlib.nullcontext()
        from forestpy.cuda_device import on_stream

        return on_stream(self.stream)

    def join_default(self) -> None:
        if self.stream is not None:
            import cupy

            self._after_side.record(self.stream)
            cupy.cuda.get_current_stream().wait_event(self._after_side)
