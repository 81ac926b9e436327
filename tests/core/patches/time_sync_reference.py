"""The time-sync plan builder as first written, in vectorised NumPy (the face-neighbour
table of ``Forest.face_neighbors``): the reference that the compiled builder of
:mod:`forestpy.patches.time_sync` must reproduce entry for entry
(``tests/core/patches/test_time_sync.py``, ``benchmarks/regrid.py --check``)."""

from __future__ import annotations

import numpy as np

from forestpy.patches.time_sync import _FACES, TimeSyncPlan, _edge_cell


def build_time_sync_plan_reference(forest, geom, patches=None) -> TimeSyncPlan:
    """Pairs of coarse and fine edge cells along every coarse-fine face (vectorised).

    ``patches`` (leaf indices, default all): only the entries whose coarse patch is one
    of them, in the whole plan's order.  Host arrays."""
    nb = forest.face_neighbors()
    parts = {k: [] for k in ("coarse", "fine", "coarse_edge", "fine_edge", "ixy", "sign")}
    wanted = None
    if patches is not None:
        wanted = np.zeros(forest.n, dtype=bool)
        wanted[np.asarray(patches, dtype=np.int64)] = True
    for face, (cside, fside, ixy, sign) in _FACES.items():
        coarse_face = nb.kind[:, face] == 2
        cp = np.flatnonzero(coarse_face if wanted is None else coarse_face & wanted)
        if len(cp) == 0:
            continue
        m = geom.my if face < 2 else geom.mx
        kc = np.arange(m)
        half = kc // (m // 2)  # which fine neighbour
        kf = 2 * (kc - half * (m // 2))  # first of the two fine edge cells
        P = np.repeat(cp, 2 * m)
        KC = np.tile(np.repeat(kc, 2), len(cp))
        KF = np.tile(np.stack([kf, kf + 1], 1).ravel(), len(cp))
        H = np.tile(np.repeat(half, 2), len(cp))
        F = nb.index[P, face, H]
        cj, ci = _edge_cell(cside, KC, geom)
        fj, fi = _edge_cell(fside, KF, geom)
        parts["coarse"].append(np.stack([P, cj, ci], 1))
        parts["fine"].append(np.stack([F, fj, fi], 1))
        parts["coarse_edge"].append(np.stack([P, np.full_like(P, cside), KC], 1))
        parts["fine_edge"].append(np.stack([F, np.full_like(F, fside), KF], 1))
        parts["ixy"].append(np.full(len(P), ixy, dtype=np.int64))
        parts["sign"].append(np.full(len(P), sign, dtype=np.int64))
    if not parts["ixy"]:
        z3 = np.zeros((0, 3), dtype=np.int64)
        z = np.zeros(0, dtype=np.int64)
        return TimeSyncPlan(z3, z3, z3, z3, z, z, np.zeros(0), 0)
    plan = {k: np.concatenate(v) for k, v in parts.items()}
    p = plan["coarse"][0::2, 0]
    width = np.where(plan["ixy"][0::2] == 1, geom.dx[p], geom.dy[p])
    return TimeSyncPlan(**plan, width=width, nx=int(np.count_nonzero(plan["ixy"] == 1)))
