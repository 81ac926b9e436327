"""Batched normal fluctuations ``amdq + apdq`` at a list of interfaces.

Used by the coarse-fine conservation fix: the total fluctuation of the Riemann problem
between a coarse cell and the fine cells along a coarse-fine edge.
"""

from __future__ import annotations

import numba

from .kernel_cache import kernel_module
from .step_kernel import jit_pointwise

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
    wrapper = _FLUCT.get(key)
    if wrapper is None:
        compiled = kernel_module(riemann, jit_pointwise).fluct

        def wrapper(ixy, ql, qr, auxl, auxr, params, out):
            compiled(ixy, ql, qr, auxl, auxr, params, out, numba.get_num_threads())

        _FLUCT[key] = wrapper
    return wrapper
