"""Which patches a rank owns: :class:`Layout`.

A serial run is a distributed run on one rank: :meth:`Layout.whole` owns every patch of
the forest, has no halo and numbers the local rows as the forest does (its ghost and
time-sync plans are the whole forest's).  :meth:`Layout.partitioned` is one rank's share
of a forest split into contiguous Morton ranges (:meth:`Forest.partition`): the owned
range ``lo:hi``, the halo (the remote patches that the owned ghost cells and the owned
time sync read, one patch deep), the local numbering (``l2g``: the owned patches in
order, then the halo patches, sorted; ``g2l``: its inverse over all leaves, -1
elsewhere), the owned parts of the plans remapped to these rows, the exchange schedules
(built through an :class:`~forestpy.parallel.exchange.Exchange`) and the early/late
split of the owned patches that the overlapped step uses.

This module imports the core only (forest, patches, backend), never the driver.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np

from forestpy.patches import build_ghost_plan, build_time_sync_plan
from forestpy.patches.ghost_plan import GhostPlan
from forestpy.patches.time_sync import TimeSyncPlan

__all__ = ["Layout", "distinct_ids"]

# the attributes of the early/late split (Layout._split_owned), made on first use
_SPLIT = frozenset({"early", "late", "early_plan", "late_plan", "first_rows", "second_rows",
                    "_early_rows", "_late_rows", "_wave_planned"})


class Layout:
    """One rank's patches: see the module docstring.  Attributes:

    ``whole`` (every patch, identity numbering), ``offsets`` (the partition), ``lo``,
    ``hi``, ``nown``, ``l2g``/``g2l`` (None when whole), ``halo``, ``ghost_plan`` and
    ``sync_plan`` (of the owned patches, in local rows), ``n_edge_rows`` (rows of the
    edge-flux array: owned, then remote fine patches), ``q_exchange``/``edge_exchange``
    (schedules, None when whole), ``local_geom``/``owned_geom`` (geometry of the local
    and owned rows), ``local_arrays``/``owned_arrays`` (what the kernels need of them),
    ``owned_sides`` (physical-boundary patches, local rows, backend arrays) and, for the
    overlapped step, ``early_plan``/``late_plan``, ``early``/``late``,
    ``first_rows``/``second_rows``."""

    whole = True
    l2g = g2l = l2g_dev = q_exchange = edge_exchange = None
    early_split = 0.5  # GPU: share of the early patches in the first launch

    @classmethod
    def whole_forest(cls, forest, geom, patch_arrays, backend, plans: bool = True) -> Layout:
        """Every patch, owned by this (only) rank: the whole forest's plans (none with
        ``plans`` False: a view that does not step)."""
        self = cls()
        n = geom.npatch
        self.backend = backend
        self.offsets = np.array([0, n], dtype=np.int64)
        self.lo, self.hi, self.nown = 0, n, n
        self.halo = np.zeros(0, dtype=np.int64)
        self.ghost_plan = self.sync_plan = None
        if plans:
            self.ghost_plan = build_ghost_plan(forest, geom, backend=backend)
            sync = build_time_sync_plan(forest, geom, backend=backend)  # GPU: made there
            self.sync_plan = sync if backend.is_gpu else sync.to(backend)
        self.n_edge_rows = n
        self.local_geom = self.owned_geom = geom
        self.local_arrays = self.owned_arrays = patch_arrays
        self.owned_sides = patch_arrays.sides
        return self

    @classmethod
    def partitioned(cls, forest, geom, patch_arrays, backend, exchange, weights=None,
                    num_eqn=1, strip_fraction=0.75, early_split=None) -> Layout:
        """This rank's share (``exchange.rank`` of ``exchange.nranks``) of ``forest``
        partitioned with ``weights``: the owned range, halo, local numbering, the owned
        parts of the plans remapped to local rows, exchange schedules (collective)."""
        self = cls()
        self.whole = False
        if early_split is not None:
            self.early_split = early_split
        be = self.backend = backend
        self.offsets = forest.partition(exchange.nranks, weights)
        lo, hi = int(self.offsets[exchange.rank]), int(self.offsets[exchange.rank + 1])
        self.lo, self.hi, self.nown = lo, hi, hi - lo
        owner = np.searchsorted(self.offsets, np.arange(forest.n), side="right") - 1

        def owned(p):
            return (p >= lo) & (p < hi)

        # the ghost plan of the owned destinations (global patch ids; built for them
        # alone: the entries of the whole forest's plan with an owned destination)
        gplan = build_ghost_plan(forest, geom, patches=np.arange(lo, hi))
        gplan = {k: getattr(gplan, k) for k in GhostPlan.__dataclass_fields__}
        reads = [gplan["copy_src"][:, 0], gplan["avg_src"][..., 0].ravel(),
                 gplan["interp_center"][:, 0],
                 gplan["interp_nbr"][gplan["interp_valid"]][..., 0].ravel()]
        # the time-sync plan of the owned coarse patches (built for them alone: the
        # whole forest's entries with an owned coarse patch, in order)
        sync = build_time_sync_plan(forest, geom, patches=np.arange(lo, hi))
        sub = {k: getattr(sync, k) for k in TimeSyncPlan.__dataclass_fields__ if k != "nx"}
        nx = sync.nx
        reads.append(sub["fine"][:, 0])
        halo = distinct_ids(forest.n, *reads)
        halo = halo[~owned(halo)]
        edge_halo = distinct_ids(forest.n, sub["fine_edge"][:, 0])
        edge_halo = edge_halo[~owned(edge_halo)]
        # the local layout of the patch arrays
        self.l2g = np.concatenate([np.arange(lo, hi, dtype=np.int64), halo])
        g2l = np.full(forest.n, -1, dtype=np.int64)
        g2l[self.l2g] = np.arange(len(self.l2g))
        self.g2l = g2l
        self.l2g_dev = be.to_device(self.l2g)
        lplan = _remap_ghost_plan(gplan, g2l)
        # edge fluxes live in a local array: owned rows first, then remote fine patches
        rows = np.full(forest.n, -1, dtype=np.int64)
        rows[lo:hi] = np.arange(hi - lo)
        rows[edge_halo] = hi - lo + np.arange(len(edge_halo))
        for k, table in (("coarse_edge", rows), ("fine_edge", rows), ("coarse", g2l),
                         ("fine", g2l)):
            sub[k] = sub[k].copy()
            sub[k][:, 0] = _lookup(table, sub[k][:, 0])
        self.sync_plan = TimeSyncPlan(**sub, nx=nx).to(be)
        self.ghost_plan = GhostPlan(**lplan).to(be)
        self.n_edge_rows = hi - lo + len(edge_halo)
        pa = patch_arrays
        strips = exchange.strip_mask(
            (pa.my + 2 * pa.mbc, pa.mx + 2 * pa.mbc),
            [gplan["copy_src"], gplan["avg_src"], gplan["interp_center"],
             gplan["interp_nbr"][gplan["interp_valid"]], sync.fine], owned)
        # both schedules and the strips' union over the ranks: one collective
        (self.q_exchange, self.edge_exchange), strips = exchange.schedules(
            [(halo, g2l), (edge_halo, rows)], owner, lo, be, share=strips)
        exchange.use_strips(self.q_exchange, np.maximum.reduce(strips), num_eqn, be,
                            strip_fraction)
        self.local_geom = _sub_geometry(geom, self.l2g)
        self.owned_geom = _sub_geometry(geom, np.arange(lo, hi))
        self.local_arrays = SimpleNamespace(
            mx=pa.mx, my=pa.my, mbc=pa.mbc, npatch=hi - lo, dx=pa.dx[lo:hi], dy=pa.dy[lo:hi],
        )
        sides = [be.to_host(s) for s in pa.sides]
        self._owned_sides = [s[owned(s)] - lo for s in sides]  # local rows
        self.owned_sides = [be.to_device(s) for s in self._owned_sides]
        self.owned_arrays = SimpleNamespace(**vars(self.local_arrays), sides=self.owned_sides)
        self.halo = halo
        self._split_of = lplan  # the early/late split: made on first use (__getattr__)
        return self

    def __getattr__(self, name):
        """The early/late split of the owned patches (``early``, ``late``,
        ``early_plan``, ...) is made on first use: only the overlapped step needs it, so
        a run that does not overlap (the CPU default) never pays for it at a regrid."""
        if name not in _SPLIT or "_split_of" not in self.__dict__:
            raise AttributeError(name)
        self._split_owned(self.__dict__.pop("_split_of"))
        return getattr(self, name)

    @property
    def nlocal(self) -> int:
        """Rows of the local patch arrays (owned, then halo)."""
        return self.nown + len(self.halo)

    def owned_rows(self, full: bool) -> slice:
        """The rows of the owned patches in an array holding every patch (``full``) or
        the local rows."""
        return slice(self.lo, self.hi) if full and not self.whole else slice(0, self.nown)

    def _split_owned(self, lplan: dict) -> None:
        """Order the owned patches as early (their ghost fill reads owned patches only)
        then late (it reads remote ones), for the overlapped step; the ghost plan
        (``lplan``, in local rows: the owned patches are the rows below ``nown``) and the
        physical-boundary sides split by destination the same way.  Every ghost value
        depends on the plan entry's source interiors alone (surface fills included), so
        the split fill gives the serial ghost values."""
        be, lo, hi, nown = self.backend, self.lo, self.hi, self.nown
        kinds = {"copy": [lplan["copy_src"][:, None, 0]],
                 "avg": [lplan["avg_src"][:, None, 0]],
                 # unused neighbours (interp_valid False) point at their destination
                 "interp": [lplan["interp_center"][:, None, 0], lplan["interp_nbr"][..., 0]]}
        remote = np.zeros(self.nlocal, dtype=bool)  # owned patches reading remote data
        entry_late = {}
        for k, srcs in kinds.items():
            dst = lplan[f"{k}_dst"][:, 0].astype(np.int64)
            reads_remote = np.zeros(len(dst), dtype=bool)
            for src in srcs:
                reads_remote |= (src >= nown).any(axis=1)
            remote[dst[reads_remote]] = True
        for k in kinds:
            entry_late[k] = remote[lplan[f"{k}_dst"][:, 0].astype(np.int64)]
        rows = np.arange(hi - lo)  # owned patches: local rows 0..n-1
        early_rows, late_rows = rows[~remote[:nown]], rows[remote[:nown]]

        def sub_plan(mask_of):
            return GhostPlan(**{f: v[mask_of[f.split("_")[0]]] for f, v in lplan.items()}).to(be)

        self.early_plan = sub_plan({k: ~m for k, m in entry_late.items()})
        self.late_plan = sub_plan(entry_late)
        la = self.local_arrays

        def group(rows):
            contiguous = len(rows) == 0 or rows[-1] - rows[0] + 1 == len(rows)
            sel = slice(int(rows[0]), int(rows[-1]) + 1) if len(rows) and contiguous else (
                slice(0, 0) if not len(rows) else be.to_device(rows))
            return SimpleNamespace(
                n=len(rows), sel=sel, rows=be.to_device(rows), ids=rows + lo,
                sides=[be.to_device(s[np.isin(s, rows)]) for s in self._owned_sides],
                arrays=SimpleNamespace(mx=la.mx, my=la.my, mbc=la.mbc, npatch=len(rows),
                                       dx=la.dx[sel], dy=la.dy[sel]),
            )

        self.early, self.late = group(early_rows), group(late_rows)
        self._early_rows, self._late_rows = early_rows, late_rows
        self.plan_two_launches(None)

    def plan_two_launches(self, wave) -> None:
        """GPU, patch-list launches (see Simulation._step_overlapped): ``early_split`` of
        the early patches first, then the late ones followed by the rest of the early
        ones.  With ``wave`` (patches the device steps at once) the first launch is a
        whole number of waves: a partial last wave would leave part of the device idle
        while the late patches wait for their ghost cells."""
        early, late = self._early_rows, self._late_rows
        na = int(round(self.early_split * len(early)))
        if wave and len(early) >= wave:
            na = min(max(wave, int(round(na / wave)) * wave), len(early) // wave * wave)
        be = self.backend
        self.first_rows = be.to_device(early[:na].astype(np.int64))
        self.second_rows = be.to_device(np.concatenate([late, early[na:]]).astype(np.int64))
        self._wave_planned = bool(wave) or not be.is_gpu or be.simulator


def distinct_ids(n, *ids):
    """The distinct patch ids among the arrays ``ids`` (each id < ``n``), sorted, as
    ``np.unique`` of their concatenation: a mask over the ``n`` leaves, no sort or hash
    of the millions of plan entries a large forest has."""
    seen = np.zeros(n, dtype=bool)
    for a in ids:
        seen[np.asarray(a).ravel()] = True
    return np.flatnonzero(seen)


def _lookup(table, ids):
    """``table[ids]`` (a global -> local lookup), checked: every id must be local."""
    out = table[ids]
    if (out < 0).any():
        raise RuntimeError("distributed layout: a plan reads a patch this rank does not hold")
    return out


def _remap_ghost_plan(plan: dict, g2l) -> dict:
    """The ghost plan's patch ids (column 0 of the triplets and blocks) -> local rows.
    Unused interpolation neighbours (``interp_valid`` False) point at their
    destination."""
    out = {k: v.copy() for k, v in plan.items()}
    for k in ("copy_dst", "copy_src", "avg_dst", "interp_dst", "interp_center"):
        out[k][:, 0] = _lookup(g2l, plan[k][:, 0])
    out["avg_src"][:, 0] = _lookup(g2l, plan["avg_src"][:, 0])
    nbr = np.where(plan["interp_valid"], plan["interp_nbr"][..., 0],
                   plan["interp_dst"][:, None, 0])
    out["interp_nbr"][..., 0] = _lookup(g2l, nbr)
    return out


def _sub_geometry(geom, ids):
    """The geometry of the patches ``ids`` (in that order)."""
    return replace(geom, level=geom.level[ids], gqx=geom.gqx[ids], gqy=geom.gqy[ids],
                   xlower=geom.xlower[ids], ylower=geom.ylower[ids], dx=geom.dx[ids],
                   dy=geom.dy[ids])
