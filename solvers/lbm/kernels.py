r"""One lattice-Boltzmann step, written once: the cell body :func:`lbm_cell`
(``numba.njit``) is run by the CPU kernel :func:`run_cpu` (``prange`` over chunks of
cells) and, compiled by :func:`forestpy.cuda_device.cuda_device`, by the CUDA kernel of
:func:`.gpu.gpu_step_kernel` (one thread per cell).

**Storage and the AA pattern** (Bailey et al., "Accelerating lattice Boltzmann fluid
flow simulations using graphics processors", ICPP 2009).  One array ``h`` of shape
``(27, ncell)`` (structure of arrays, cell index ``n = (i * ny + j) * nz + k``) holds
``h_q = f_q - w_q``.  Between an odd step and the next even one it is in the *natural*
layout, ``h[q, x] = f_q(x)`` (post-streaming, before collision).

* even step (local): cell ``x`` reads ``h[q, x]``, collides, writes ``f*_q`` to
  ``h[OPP[q], x]``;
* odd step: cell ``x`` reads ``f_q(x) = h[OPP[q], x - c_q]`` (or, when ``x - c_q`` is
  solid, the bounced-back ``f*_{OPP[q]}(x) = h[q, x]``), collides and writes ``f*_q`` to
  ``h[q, x + c_q]`` (or, when ``x + c_q`` is solid, to ``h[OPP[q], x]``, where the next
  even step reads the reflected population).

A cell writes exactly the slots it read, so the update is in place and race-free with
any order of cells; ``SOLID`` and ``VELOCITY`` cells do nothing.  Neighbours wrap around
(periodic in every direction); walls are solid cells, bounce-back is half-way (the wall
sits half a cell from the last fluid cell).

**Open boundaries.** ``VELOCITY`` (inlet) cells are walls moving at the inlet velocity
``u_in``: a population reflected from one gains Ladd's momentum term ``6 w_q rho_in
c_q . u_in`` (added where the odd step pulls from, or pushes to, an inlet cell), which
injects exactly that mass per link and step.  ``PRESSURE`` (outlet) cells stream like
fluid cells but, instead of colliding, emit the equilibrium at ``rho_out`` and the
velocity ``u_n n`` (``n`` the outward normal) with ``rho_out (1 + u_n) = S_0 + 2 S_out``
(Zou & He, Phys. Fluids 9, 1997), ``S_0`` and ``S_out`` the populations that arrive
along the boundary and from the inside (those that wrap round from the far side are not
used).

**Collision** (two-relaxation-time, Ginzburg et al., Commun. Comput. Phys. 3, 2008):
with ``h±_q = (h_q ± h_OPP[q]) / 2`` and the same split of the equilibrium and of the
force term,

.. math::

    f^*_q = f_q - \omega_+ (f^+_q - f^{eq+}_q) - \omega_- (f^-_q - f^{eq-}_q)
            + (1 - \omega_+/2) S^+_q + (1 - \omega_-/2) S^-_q ,

BGK being ``omega_- = omega_+ = 1 / tau``.  The body force enters by Guo's scheme
(Guo, Zheng & Shi, Phys. Rev. E 65, 046308, 2002): ``u = (sum_q f_q c_q + F/2) / rho``
in the equilibrium and ``S_q = w_q [3 (c_q - u) + 9 (c_q . u) c_q] . F``, so
``S^+_q = w_q (9 (c_q.u)(c_q.F) - 3 u.F)`` and ``S^-_q = 3 w_q c_q.F``.

Arithmetic is float64 whatever the storage type (float32 or float64).  The CPU and the
CUDA kernels do the same operations in the same order, so with fused multiply-adds off
(the GPU backend's default) they give the same bits.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from .lattice import CX, CY, CZ, OPP, W

__all__ = ["lbm_cell", "run_cpu", "run_cpu_serial", "CHUNK", "FLUID", "SOLID", "VELOCITY",
           "PRESSURE"]

#: cells per iteration of the CPU kernel's parallel loop
CHUNK = 512
#: cell kinds (``flags``)
FLUID = 0
SOLID = 1
VELOCITY = 2
PRESSURE = 3


@numba.njit(cache=True, inline="always")
def _wrap(a, n):
    if a < 0:
        return a + n
    if a >= n:
        return a - n
    return a


@numba.njit(cache=True, inline="always")
def _equilibrium_cell(rho, ux, uy, uz, buf):
    """``buf`` = ``f_eq(rho, u) - w``: the outgoing populations of a pressure-outlet
    cell."""
    drho = rho - 1.0
    uu = ux * ux + uy * uy + uz * uz
    buf[0] = W[0] * (drho - 1.5 * rho * uu)
    for q in range(1, 14):
        w = W[q]
        cu = CX[q] * ux + CY[q] * uy + CZ[q] * uz
        eqp = w * (drho + rho * (4.5 * cu * cu - 1.5 * uu))
        eqm = w * (3.0 * rho * cu)
        buf[q] = eqp + eqm
        buf[q + 13] = eqp - eqm


@numba.njit(cache=True, inline="always")
def load(h, q, n):
    """The stored value ``h[q, n]`` (FP16 storage swaps this and :func:`store` for
    the decoding/encoding versions of :mod:`.fp16`)."""
    return h[q, n]


@numba.njit(cache=True, inline="always")
def store(h, q, n, v):
    """``h[q, n] = v``."""
    h[q, n] = v


@numba.njit(cache=True)
def lbm_cell(h, flags, n, nx, ny, nz, odd, om_p, om_m, fx, fy, fz, rho_in, ux_in, uy_in, uz_in,
             rho_out, ox, oy, oz, buf):
    """Collide and stream cell ``n`` (see the module docstring); ``buf``: 27 float64
    of scratch."""
    kind = flags[n]
    if kind == SOLID or kind == VELOCITY:
        return
    nyz = ny * nz
    i = n // nyz
    r = n - i * nyz
    j = r // nz
    k = r - j * nz
    buf[0] = load(h, 0, n)
    for q in range(1, 27):
        if odd:
            m = (_wrap(i - CX[q], nx) * ny + _wrap(j - CY[q], ny)) * nz + _wrap(k - CZ[q], nz)
            nb = flags[m]
            if nb == SOLID:
                buf[q] = load(h, q, n)
            elif nb == VELOCITY:  # moving-wall bounce-back
                buf[q] = load(h, q, n) + 6.0 * W[q] * rho_in * (CX[q] * ux_in + CY[q] * uy_in
                                                         + CZ[q] * uz_in)
            else:
                buf[q] = load(h, OPP[q], m)
        else:
            buf[q] = load(h, q, n)
    # moments (h = f - w: sum_q w_q = 1, sum_q w_q c_q = 0)
    drho = buf[0]
    jx = 0.0
    jy = 0.0
    jz = 0.0
    for q in range(1, 14):
        a = buf[q]
        b = buf[q + 13]
        drho += a + b
        d = a - b
        jx += CX[q] * d
        jy += CY[q] * d
        jz += CZ[q] * d
    rho = 1.0 + drho
    if kind == PRESSURE:
        # the normal velocity from the density and the populations that arrive from the
        # inside or along the boundary (Zou & He 1997): rho (1 + u_n) = S_0 + 2 S_out
        s0 = 0.0
        sout = 0.0
        for q in range(27):
            cn = CX[q] * ox + CY[q] * oy + CZ[q] * oz
            if cn == 0:
                s0 += buf[q] + W[q]
            elif cn > 0:
                sout += buf[q] + W[q]
        un = (s0 + 2.0 * sout) / rho_out - 1.0
        _equilibrium_cell(rho_out, un * ox, un * oy, un * oz, buf)
    else:
        ux = (jx + 0.5 * fx) / rho
        uy = (jy + 0.5 * fy) / rho
        uz = (jz + 0.5 * fz) / rho
        uu = ux * ux + uy * uy + uz * uz
        uf = ux * fx + uy * fy + uz * fz
        gp = 1.0 - 0.5 * om_p
        gm = 1.0 - 0.5 * om_m
        # rest population
        w = W[0]
        buf[0] = (buf[0] - om_p * (buf[0] - w * (drho - 1.5 * rho * uu))
                  + gp * (w * (-3.0 * uf)))
        for q in range(1, 14):
            w = W[q]
            cu = CX[q] * ux + CY[q] * uy + CZ[q] * uz
            cf = CX[q] * fx + CY[q] * fy + CZ[q] * fz
            eqp = w * (drho + rho * (4.5 * cu * cu - 1.5 * uu))
            eqm = w * (3.0 * rho * cu)
            sp = w * (9.0 * cu * cf - 3.0 * uf)
            sm = w * (3.0 * cf)
            a = buf[q]
            b = buf[q + 13]
            dp = om_p * (0.5 * (a + b) - eqp) - gp * sp
            dm = om_m * (0.5 * (a - b) - eqm) - gm * sm
            buf[q] = a - dp - dm
            buf[q + 13] = b - dp + dm
    if odd:
        store(h, 0, n, buf[0])
        for q in range(1, 27):
            m = (_wrap(i + CX[q], nx) * ny + _wrap(j + CY[q], ny)) * nz + _wrap(k + CZ[q], nz)
            nb = flags[m]
            if nb == SOLID:
                store(h, OPP[q], n, buf[q])
            elif nb == VELOCITY:
                store(h, OPP[q], n, buf[q] - 6.0 * W[q] * rho_in * (CX[q] * ux_in + CY[q] * uy_in
                                                                   + CZ[q] * uz_in))
            else:
                store(h, q, m, buf[q])
    else:
        for q in range(27):
            store(h, OPP[q], n, buf[q])


@numba.njit(cache=True, parallel=True)
def run_cpu(h, flags, nx, ny, nz, t0, steps, om_p, om_m, fx, fy, fz, rho_in, ux_in, uy_in,
            uz_in, rho_out, ox, oy, oz):
    """``steps`` steps on the CPU from step number ``t0`` (its parity picks even/odd):
    ``h`` (27, nx*ny*nz) float32/float64 in place, ``flags`` uint8 (the cell kinds),
    ``rho_in, u*_in``: the ``VELOCITY`` cells' density and velocity, ``rho_out``: the
    ``PRESSURE`` cells' density, ``ox, oy, oz``: their outward normal (integers).
    Threads share chunks of ``CHUNK`` cells."""
    ncell = nx * ny * nz
    nchunk = (ncell + CHUNK - 1) // CHUNK
    for s in range(steps):
        odd = (t0 + s) & 1
        for c in prange(nchunk):
            buf = np.empty(27)
            for n in range(c * CHUNK, min(ncell, (c + 1) * CHUNK)):
                lbm_cell(h, flags, n, nx, ny, nz, odd, om_p, om_m, fx, fy, fz, rho_in, ux_in, uy_in,
                         uz_in, rho_out, ox, oy, oz, buf)


@numba.njit(cache=True)
def run_cpu_serial(h, flags, nx, ny, nz, t0, steps, om_p, om_m, fx, fy, fz, rho_in, ux_in, uy_in,
                   uz_in, rho_out, ox, oy, oz):
    """:func:`run_cpu` on one thread (grids of at most ``CHUNK`` cells, where starting
    the threads every step would cost more than the step)."""
    ncell = nx * ny * nz
    buf = np.empty(27)
    for s in range(steps):
        odd = (t0 + s) & 1
        for n in range(ncell):
            lbm_cell(h, flags, n, nx, ny, nz, odd, om_p, om_m, fx, fy, fz, rho_in, ux_in, uy_in,
                         uz_in, rho_out, ox, oy, oz, buf)
