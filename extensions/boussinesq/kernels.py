"""The explicit part of a VBM frame as three per-cell passes, CPU (Numba) and GPU.

Each pass is a pointwise body over one cell ``(j, i)``, driven by a ``prange`` loop on
the CPU and compiled by :func:`forestpy.cuda_device.cuda_device` into a Numba-CUDA
kernel (one thread per cell) on the GPU, from the same source:

1. ``phi``: the Bernoulli update with the ship pressure evaluated in place and the
   sponge, ``phi = (phi - dt (g zeta + P)) / (1 + dt sigma) * wet``;
2. ``rhs``: the right-hand side of the psi equation, ``-div(D grad phi)``;
3. ``zeta``: the mass update ``zn = zeta - dt div(h grad phi - D grad psi)``, then the
   sponge and land, and what the sponge took (``zn - zeta``, summed by the caller).

Each pass reads its neighbours from arrays no thread of the pass writes, so the
passes need no barrier inside.  The divergence keeps the terms in the order of the
array form (:meth:`VBM._div`): on the CPU the frame is bitwise the array form's.
On the GPU a frame is 3 launches where the array form was ~60 CuPy operations, each a
full pass over the grid.
"""

from __future__ import annotations

import math

import numba as nb
from numba import cuda  # module level: the CUDA simulator swaps it in the kernels' globals

__all__ = ["frame_args", "frame_cpu", "frame_gpu"]


@nb.njit(cache=True)
def body_div(fx, fy, u, j, i, ny, nx):
    """``div(F grad u)`` at cell ``(j, i)`` (face coefficients ``fx``, ``fy`` already
    divided by dx², dy²; no flux through the outer boundary)."""
    out = 0.0
    if i < nx - 1:
        out += fx[j, i] * (u[j, i + 1] - u[j, i])
    if i > 0:
        out -= fx[j, i - 1] * (u[j, i] - u[j, i - 1])
    if j < ny - 1:
        out += fy[j, i] * (u[j + 1, i] - u[j, i])
    if j > 0:
        out -= fy[j - 1, i] * (u[j, i] - u[j - 1, i])
    return out


@nb.njit(cache=True)
def body_pressure(x, y, par):
    """The cos² pulse of :func:`.vbm.ship_pressure` at ``(x, y)``; ``par[2:9]`` = ``xs,
    ys, cos(heading), sin(heading), length, beam, p0`` (``p0 = 0``: no ship)."""
    p0 = par[8]
    if p0 == 0.0:
        return 0.0
    xs, ys, ca, sa, length, beam = par[2], par[3], par[4], par[5], par[6], par[7]
    xi = (x - xs) * ca + (y - ys) * sa
    eta = -(x - xs) * sa + (y - ys) * ca
    fx = 0.0
    if abs(xi) < 0.5 * length:
        c = math.cos(math.pi * xi / length)
        fx = c * c
    fy = 0.0
    if abs(eta) < 0.5 * beam:
        c = math.cos(math.pi * eta / beam)
        fy = c * c
    return p0 * fx * fy


@nb.njit(cache=True)
def body_phi(phi, zeta, sigma, wet, xc, yc, par, j, i):
    """Pass 1 at ``(j, i)``; ``par``: :func:`frame_args`."""
    dt, g = par[0], par[1]
    force = g * zeta[j, i] + body_pressure(xc[i], yc[j], par)
    damp = 1.0 / (1.0 + dt * sigma[j, i])
    phi[j, i] = (phi[j, i] - dt * force) * damp * wet[j, i]


@nb.njit(cache=True)
def body_rhs(fxD, fyD, phi, rhs, j, i, ny, nx):
    """Pass 2 at ``(j, i)``."""
    rhs[j, i] = -body_div(fxD, fyD, phi, j, i, ny, nx)


@nb.njit(cache=True)
def body_zeta(fxh, fyh, fxD, fyD, phi, psi, zeta, sigma, wet, taken, par, j, i, ny, nx):
    """Pass 3 at ``(j, i)``."""
    dt = par[0]
    div = body_div(fxh, fyh, phi, j, i, ny, nx) - body_div(fxD, fyD, psi, j, i, ny, nx)
    zn = zeta[j, i] - dt * div
    damp = 1.0 / (1.0 + dt * sigma[j, i])
    z = zn * damp * wet[j, i]
    zeta[j, i] = z
    taken[j, i] = zn - z


@nb.njit(parallel=True, cache=True)
def _phi_cpu(phi, zeta, sigma, wet, xc, yc, par):
    for j in nb.prange(phi.shape[0]):
        for i in range(phi.shape[1]):
            body_phi(phi, zeta, sigma, wet, xc, yc, par, j, i)


@nb.njit(parallel=True, cache=True)
def _rhs_cpu(fxD, fyD, phi, rhs):
    ny, nx = phi.shape
    for j in nb.prange(ny):
        for i in range(nx):
            body_rhs(fxD, fyD, phi, rhs, j, i, ny, nx)


@nb.njit(parallel=True, cache=True)
def _zeta_cpu(fxh, fyh, fxD, fyD, phi, psi, zeta, sigma, wet, taken, par):
    ny, nx = phi.shape
    for j in nb.prange(ny):
        for i in range(nx):
            body_zeta(fxh, fyh, fxD, fyD, phi, psi, zeta, sigma, wet, taken, par, j, i, ny, nx)


_GPU: dict = {}


def _gpu_kernels():
    if _GPU:
        return _GPU
    from forestpy.cuda_device import cuda_device

    bphi, brhs, bzeta = (cuda_device(f) for f in (body_phi, body_rhs, body_zeta))

    @cuda.jit
    def phi_k(phi, zeta, sigma, wet, xc, yc, par):
        i, j = cuda.grid(2)
        if j < phi.shape[0] and i < phi.shape[1]:
            bphi(phi, zeta, sigma, wet, xc, yc, par, j, i)

    @cuda.jit
    def rhs_k(fxD, fyD, phi, rhs):
        i, j = cuda.grid(2)
        ny, nx = phi.shape[0], phi.shape[1]
        if j < ny and i < nx:
            brhs(fxD, fyD, phi, rhs, j, i, ny, nx)

    @cuda.jit
    def zeta_k(fxh, fyh, fxD, fyD, phi, psi, zeta, sigma, wet, taken, par):
        i, j = cuda.grid(2)
        ny, nx = phi.shape[0], phi.shape[1]
        if j < ny and i < nx:
            bzeta(fxh, fyh, fxD, fyD, phi, psi, zeta, sigma, wet, taken, par, j, i, ny, nx)

    _GPU.update(phi=phi_k, rhs=rhs_k, zeta=zeta_k)
    return _GPU


_TILE = (32, 8)  # threads (i, j) of a block: a warp along a row


class _Frame:
    """The three passes on one backend: ``phi(...)``, ``rhs(...)``, ``zeta(...)`` with
    the arrays of :class:`.vbm.VBM` (CPU: NumPy, GPU: CuPy or, in the simulator,
    NumPy)."""

    def __init__(self, shape, gpu: bool):
        if gpu:
            k = _gpu_kernels()
            ny, nx = shape
            grid = (-(-nx // _TILE[0]), -(-ny // _TILE[1]))
            self.phi = k["phi"][grid, _TILE]
            self.rhs = k["rhs"][grid, _TILE]
            self.zeta = k["zeta"][grid, _TILE]
        else:
            self.phi, self.rhs, self.zeta = _phi_cpu, _rhs_cpu, _zeta_cpu


def frame_cpu(shape):
    return _Frame(shape, gpu=False)


def frame_gpu(shape):
    return _Frame(shape, gpu=True)


def frame_args(dt, g, xs, ys, heading, length, beam, p0) -> tuple:
    """The ``par`` argument of the passes: ``(dt, g, xs, ys, cos(heading), sin(heading),
    length, beam, p0)``, floats passed by value (no host-to-device copy per frame)."""
    return tuple(
        float(v)
        for v in (dt, g, xs, ys, math.cos(heading), math.sin(heading), length, beam, p0)
    )
