"""Batched normal fluctuations ``amdq + apdq`` at a list of interfaces.

Used by the coarse-fine conservation fix: the total fluctuation of the Riemann problem
between a coarse cell and the fine cells along a coarse-fine edge.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from .step_kernel import _OPTS, jit_pointwise

__all__ = ["make_fluctuation_kernel"]

_FLUCT: dict = {}


def make_fluctuation_kernel(riemann):
    """Compiled batched function ``fluct(ixy, ql, qr, auxl, auxr, params, out)``.

    ``ql``/``qr`` are (n, meqn) states left/below and right/above of ``n`` interfaces,
    ``auxl``/``auxr`` (n, maux) their aux values (maux may be 0), ``ixy`` 1 (x-normal)
    or 2 (y-normal).  Writes ``out[k] = amdq + apdq`` of ``rpn2`` at interface ``k``.
    Parallel over interfaces.
    """
    key = (riemann.rpn2, int(riemann.num_eqn), int(riemann.num_waves))
    fn = _FLUCT.get(key)
    if fn is not None:
        return fn
    meqn = int(riemann.num_eqn)
    mwaves = int(riemann.num_waves)
    rpn2 = jit_pointwise(riemann.rpn2)

    @numba.njit(**_OPTS)
    def run_chunk(lo, hi, ixy, ql, qr, auxl, auxr, params, out):
        wave = np.zeros((meqn, mwaves))
        s = np.zeros(mwaves)
        amdq = np.zeros(meqn)
        apdq = np.zeros(meqn)
        for k in range(lo, hi):
            rpn2(ixy, ql[k], qr[k], auxl[k], auxr[k], params, wave, s, amdq, apdq)
            for m in range(meqn):
                out[k, m] = amdq[m] + apdq[m]

    @numba.njit(parallel=True, **_OPTS)
    def fluct(ixy, ql, qr, auxl, auxr, params, out):
        n = ql.shape[0]
        if ql.shape[1] != meqn or qr.shape[0] != n or qr.shape[1] != meqn:
            raise ValueError("ql and qr must have shape (n, num_eqn)")
        if auxl.shape[0] != n or auxr.shape[0] != n:
            raise ValueError("auxl and auxr must have shape (n, maux)")
        if out.shape[0] < n or out.shape[1] < meqn:
            raise ValueError("out must have shape (n, num_eqn)")
        if n == 0:
            return
        nchunk = min(n, numba.get_num_threads())
        for c in prange(nchunk):
            lo = (c * n) // nchunk
            hi = ((c + 1) * n) // nchunk
            run_chunk(lo, hi, ixy, ql, qr, auxl, auxr, params, out)

    _FLUCT[key] = fluct
    return fluct
