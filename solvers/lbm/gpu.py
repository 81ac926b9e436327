"""The CUDA kernel of one lattice-Boltzmann step: :func:`.kernels.lbm_cell`, the CPU's
cell body, compiled as a device function (:func:`forestpy.cuda_device.cuda_device`) and
run by one thread per cell (1D blocks over the cell index, so consecutive threads read
consecutive addresses of each of the 27 rows of ``h``).  On a machine without a GPU it
runs in Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``).
"""

from __future__ import annotations

import numba
from numba import cuda

from forestpy.cuda_device import cuda_device

from .kernels import lbm_cell

__all__ = ["gpu_step_kernel", "THREADS"]

#: threads per block
THREADS = 128
_GPU: dict = {}


def gpu_step_kernel():
    """The CUDA kernel ``step[blocks, THREADS](h, flags, nx, ny, nz, odd, om_p, om_m,
    fx, fy, fz, rho_in, ux_in, uy_in, uz_in, rho_out, ox, oy, oz)`` (arguments as
    :func:`.kernels.run_cpu`'s, ``odd`` the step's parity); compiled once per process."""
    if "step" in _GPU:
        return _GPU["step"]
    _GPU["step"] = cuda.jit(_step)
    return _GPU["step"]


def _step(h, flags, nx, ny, nz, odd, om_p, om_m, fx, fy, fz, rho_in, ux_in, uy_in, uz_in,
          rho_out, ox, oy, oz):
    n = cuda.grid(1)
    if n < nx * ny * nz:
        buf = cuda.local.array(27, numba.float64)
        _cell(h, flags, n, nx, ny, nz, odd, om_p, om_m, fx, fy, fz, rho_in, ux_in, uy_in, uz_in,
              rho_out, ox, oy, oz, buf)


_cell = cuda_device(lbm_cell)
