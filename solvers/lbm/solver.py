"""The D3Q27 lattice-Boltzmann solver on a uniform periodic grid (lattice units:
``dx = dt = 1``), CPU or GPU (:mod:`.kernels`).

>>> import numpy as np
>>> from forestpy.solvers.lbm import LBM
>>> sim = LBM((8, 8, 8), tau=0.8)
>>> sim.run(10)
>>> round(float(sim.mass()), 12)
512.0
"""

from __future__ import annotations

import os

import numpy as np

from forestpy.backend import get_backend

from . import fp16
from .kernels import CHUNK, PRESSURE, SOLID, VELOCITY, run_cpu, run_cpu_serial
from .lattice import CS2, OPP, C, Q, W, equilibrium

__all__ = ["LBM", "COLLISIONS", "KERNELS", "MAGIC_TRT", "sphere"]

COLLISIONS = ("bgk", "trt")
#: the GPU kernels (``LBM(kernel=...)``)
KERNELS = ("cell", "register")
#: the TRT "magic" parameter (1/om+ - 1/2)(1/om- - 1/2) that puts the half-way
#: bounce-back wall exactly half a cell out for Poiseuille flow
MAGIC_TRT = 3.0 / 16.0


def sphere(shape, center, radius) -> np.ndarray:
    """Bool mask of the cells of ``shape`` whose centres (integer coordinates ``(i, j,
    k)``) lie within ``radius`` of ``center``: a solid flag field."""
    shape = tuple(int(s) for s in shape)
    center = np.asarray(center, dtype=np.float64)
    if len(shape) != 3 or center.shape != (3,) or not float(radius) > 0:
        raise ValueError("sphere needs a 3D shape, a 3D center and a radius > 0")
    x = np.ogrid[:shape[0], :shape[1], :shape[2]]
    d2 = sum((xi - c) ** 2 for xi, c in zip(x, center))
    return d2 <= float(radius) ** 2


class LBM:
    """D3Q27 lattice Boltzmann, one copy of the distributions (AA pattern).

    Parameters
    ----------
    shape : (nx, ny, nz)
        Cells; every direction is periodic (walls are solid cells).
    tau : float
        BGK relaxation time (> 1/2); kinematic viscosity ``nu = (tau - 1/2) / 3``.  For
        TRT it sets the symmetric rate ``omega_+ = 1 / tau``.
    collision : "bgk" or "trt"
        TRT: the antisymmetric rate from ``magic`` (default 3/16).
    force : 3 floats
        Uniform body force density (Guo forcing).
    solid : bool array of ``shape`` or None
        Solid cells (half-way bounce-back at their faces).
    inlet, inlet_velocity, inlet_density : bool array of ``shape`` or None, 3 floats, float
        Velocity-inlet cells: walls moving at ``inlet_velocity`` (bounce-back with
        Ladd's momentum term ``6 w_q rho_in c_q.u``; each fluid-inlet link injects
        ``6 w_q rho_in c_q.u`` of mass per step).  They hold no fluid.
    outlet, outlet_density, outlet_normal : bool array or None, float, 3 integers
        Pressure-outlet cells (fluid cells of the boundary layer): each step they emit
        the equilibrium at ``outlet_density`` and the normal velocity ``u_n`` given by
        ``rho (1 + u_n) = S_0 + 2 S_out`` (Zou & He 1997) from the populations that
        arrive along the boundary (``S_0``) or from the inside (``S_out``) only;
        ``outlet_normal`` is the outward axis direction, e.g. ``(1, 0, 0)``.
        Populations that leave through a side wrap round to the opposite side, so an
        open direction has its inlet on one side and its outlet on the other.
    rho, u : initial density (scalar or ``shape``) and velocity ``(3, *shape)``;
        the distributions start at equilibrium.  Default: rest at ``rho = 1``.
    dtype : "float64", "float32" or "float16"
        Storage of the distributions (arithmetic is float64); float16: binary16 of
        ``2^15 (f - w)`` (:mod:`.fp16`).
    backend : "cpu", "gpu" or a :class:`forestpy.backend.Backend`
        Where the distributions live and the kernels run.
    kernel : "cell", "register" or None
        The GPU kernel: ``"cell"`` the CPU's cell body run per thread (:mod:`.gpu`),
        ``"register"`` the unrolled kernel generated for this grid (:mod:`.fast`).
        Default: the environment variable ``FORESTPY_LBM_KERNEL``, else ``"cell"``.
        The CPU always runs the cell kernel.
    arith : "float32", "float64" or None
        The register kernel's working precision; default float64 for float64 storage,
        float32 for float32 and float16 storage.  (The cell kernel computes in
        float64.)

    The state is host-visible only through :meth:`distributions` and the fields
    computed from it (one device-to-host copy each).
    """

    def __init__(self, shape, tau, collision="bgk", magic=MAGIC_TRT, force=(0.0, 0.0, 0.0),
                 solid=None, inlet=None, inlet_velocity=(0.0, 0.0, 0.0), inlet_density=1.0,
                 outlet=None, outlet_density=1.0, outlet_normal=None, rho=1.0, u=None,
                 dtype="float64",
                 backend="cpu", kernel=None, arith=None):
        shape = tuple(int(s) for s in np.atleast_1d(shape))
        if len(shape) != 3 or min(shape) < 1:
            raise ValueError(f"shape must be three positive cell counts, got {shape}")
        tau = float(tau)
        if not tau > 0.5:
            raise ValueError(f"tau must be > 1/2 (positive viscosity), got {tau}")
        if collision not in COLLISIONS:
            raise ValueError(f"unknown collision {collision!r}; valid: {COLLISIONS}")
        magic = float(magic)
        if collision == "trt" and not magic > 0:
            raise ValueError(f"the TRT magic parameter must be > 0, got {magic}")
        force = np.asarray(force, dtype=np.float64)
        if force.shape != (3,) or not np.all(np.isfinite(force)):
            raise ValueError(f"force must be three finite numbers, got {force!r}")
        dtype = np.dtype(dtype)
        if dtype not in (np.float16, np.float32, np.float64):
            raise ValueError(f"dtype must be float16, float32 or float64, got {dtype.name}")
        masks = {}
        for name, mask in (("solid", solid), ("inlet", inlet), ("outlet", outlet)):
            mask = np.zeros(shape, dtype=bool) if mask is None else np.asarray(mask)
            if mask.shape != shape:
                raise ValueError(f"{name} must have the grid's shape {shape}, got {mask.shape}")
            masks[name] = mask.astype(bool)
        solid = masks["solid"]
        if np.any((solid & masks["inlet"]) | (solid & masks["outlet"])
                  | (masks["inlet"] & masks["outlet"])):
            raise ValueError("solid, inlet and outlet cells must not overlap")
        inlet_velocity = np.asarray(inlet_velocity, dtype=np.float64)
        if inlet_velocity.shape != (3,) or not np.all(np.isfinite(inlet_velocity)):
            raise ValueError(f"inlet_velocity must be three finite numbers, got "
                             f"{inlet_velocity!r}")
        for name, value in (("inlet_density", inlet_density),
                            ("outlet_density", outlet_density)):
            if not float(value) > 0 or not np.isfinite(float(value)):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if outlet_normal is None:
            outlet_normal = (0, 0, 0)
            if masks["outlet"].any():
                raise ValueError("outlet cells need outlet_normal, e.g. (1, 0, 0)")
        normal = np.asarray(outlet_normal)
        if normal.shape != (3,) or (masks["outlet"].any() and not (
                np.array_equal(np.abs(normal), np.abs(normal).astype(bool))
                and np.abs(normal).sum() == 1 and np.all(normal == np.round(normal)))):
            raise ValueError(f"outlet_normal must be an axis direction such as (1, 0, 0) or "
                             f"(0, -1, 0), got {outlet_normal!r}")
        self.inlet, self.outlet = masks["inlet"], masks["outlet"]
        self.inlet_velocity = inlet_velocity
        self.inlet_density = float(inlet_density)
        self._open = (float(inlet_density), *map(float, inlet_velocity),
                      float(outlet_density), *(int(v) for v in normal))
        # cells without fluid: solid and inlet (moving-wall) cells
        self.walls = solid | self.inlet
        self.shape = shape
        self.tau = tau
        self.collision = collision
        self.omega_plus = 1.0 / tau
        if collision == "bgk":
            self.omega_minus = self.omega_plus
        else:
            self.omega_minus = 1.0 / (magic / (tau - 0.5) + 0.5)
        self.force = force
        self.dtype = dtype
        self.solid = solid.astype(bool)
        self.backend = get_backend(backend)
        if kernel is None:
            kernel = os.environ.get("FORESTPY_LBM_KERNEL", "cell") if self.backend.is_gpu \
                else "cell"
        if kernel not in KERNELS:
            raise ValueError(f"unknown kernel {kernel!r}; valid: {KERNELS}")
        if kernel == "register" and not self.backend.is_gpu:
            raise ValueError("the register kernel runs on the GPU backend only")
        if arith is None:
            arith = "float64" if dtype == np.float64 else "float32"
        if arith not in ("float32", "float64"):
            raise ValueError(f"arith must be float32 or float64, got {arith!r}")
        if kernel == "register":
            from .fast import check_shape

            check_shape(shape)
        self.kernel = kernel
        self.arith = arith if kernel == "register" else "float64"
        self.t = 0  # steps done
        rho = np.asarray(rho, dtype=np.float64)
        if rho.shape not in ((), shape) or not np.all(rho > 0) or not np.all(np.isfinite(rho)):
            raise ValueError(f"rho must be a positive number or a positive array of shape "
                             f"{shape}")
        rho = np.broadcast_to(rho, shape)
        u = np.zeros((3, *shape)) if u is None else np.asarray(u, dtype=np.float64)
        if u.shape != (3, *shape):
            raise ValueError(f"u must have shape {(3, *shape)}, got {u.shape}")
        h = equilibrium(rho, u) - W.reshape(Q, 1, 1, 1)
        h[:, self.walls] = 0.0
        self.ncell = int(np.prod(shape))
        be = self.backend
        h = h.reshape(Q, self.ncell)
        # FP16: binary16 bits of SCALE * h in a uint16 array (.fp16)
        self._h = be.to_device(fp16.encode(h) if dtype == np.float16 else h.astype(dtype))
        flags = np.zeros(shape, dtype=np.uint8)
        flags[self.solid] = SOLID
        flags[self.inlet] = VELOCITY
        flags[self.outlet] = PRESSURE
        self._flags = be.to_device(flags.reshape(-1))

    @property
    def viscosity(self) -> float:
        """Kinematic viscosity ``cs^2 (tau - 1/2)`` in lattice units."""
        return CS2 * (self.tau - 0.5)

    def run(self, steps: int) -> None:
        """Advance ``steps`` time steps (asynchronous on the GPU)."""
        steps = int(steps)
        if steps < 0:
            raise ValueError(f"steps must be >= 0, got {steps}")
        nx, ny, nz = self.shape
        args = (self.omega_plus, self.omega_minus, *map(float, self.force), *self._open)
        if self.backend.is_gpu and self.kernel == "register":
            self._run_register(steps, args)
        elif self.backend.is_gpu:
            from .gpu import THREADS, gpu_step_kernel

            kernel = fp16.gpu_step_kernel16() if self.dtype == np.float16 else gpu_step_kernel()
            blocks = (self.ncell + THREADS - 1) // THREADS
            for _ in range(steps):
                kernel[blocks, THREADS](self._h, self._flags, nx, ny, nz, self.t & 1, *args)
                self.t += 1
        elif steps:
            run, serial = ((run_cpu, run_cpu_serial) if self.dtype != np.float16
                           else fp16.fp16_kernels()[1:])
            run = serial if self.ncell <= CHUNK else run
            run(self._h, self._flags, nx, ny, nz, self.t, steps, *args)
            self.t += steps

    def _run_register(self, steps, args):
        from forestpy.cuda_device import launch_kernel

        from . import fast

        nx, ny, nz = self.shape
        threads = fast.THREADS
        outlet = tuple(self._open[5:]) if self.outlet.any() else None
        even, odd = fast.register_kernels(
            self.shape, self.arith, self.dtype.name, forced=bool(np.any(self.force)),
            walls=bool(self.walls.any()), inlet=bool(self.inlet.any()), outlet=outlet,
            threads=threads)
        h = self._h.reshape(-1)
        if self.dtype == np.float16:
            h = h.view(np.float16)
        grid = ((nz + threads - 1) // threads, ny, nx)
        for _ in range(steps):
            launch_kernel(odd if self.t & 1 else even, grid, threads, 0, h, self._flags,
                          *args[:10])
            self.t += 1

    # ---- host views of the state -------------------------------------------------
    def raw(self) -> np.ndarray:
        """The stored array ``h`` (27, nx, ny, nz) as it is (layout of step parity),
        copied to the host; FP16 storage: the stored float16 numbers, ``fp16.SCALE * h``."""
        self.backend.synchronize()
        h = np.array(self.backend.to_host(self._h)).reshape(Q, *self.shape)
        return h.view(np.float16) if self.dtype == np.float16 else h

    def distributions(self) -> np.ndarray:
        """``f_q(x)`` at time ``t`` (after streaming, before collision), float64,
        shape (27, nx, ny, nz); solid and inlet cells hold the rest weights (``rho = 1,
        u = 0``)."""
        h = self.raw().astype(np.float64)
        if self.dtype == np.float16:
            h *= 1.0 / fp16.SCALE
        if self.t % 2:
            # after an even step h[OPP[q], x] holds f*_q(x): stream it (numpy, host)
            out = np.empty_like(h)
            for q in range(Q):
                shift = tuple(int(s) for s in C[q])
                pulled = np.roll(h[OPP[q]], shift, axis=(0, 1, 2))
                moving = 6.0 * W[q] * self.inlet_density * float(C[q] @ self.inlet_velocity)
                from_inlet = np.roll(self.inlet, shift, axis=(0, 1, 2))
                from_solid = np.roll(self.solid, shift, axis=(0, 1, 2))
                out[q] = np.where(from_solid, h[q], np.where(from_inlet, h[q] + moving,
                                                              pulled))
            h = out
        h[:, self.walls] = 0.0
        return h + W.reshape(Q, 1, 1, 1)

    def density(self) -> np.ndarray:
        """Density ``sum_q f_q`` (nx, ny, nz)."""
        return self.distributions().sum(axis=0)

    def velocity(self) -> np.ndarray:
        """Velocity ``(sum_q f_q c_q + F/2) / rho`` (3, nx, ny, nz); 0 in solid and
        inlet cells."""
        f = self.distributions()
        rho = f.sum(axis=0)
        u = np.tensordot(C.T.astype(np.float64), f, axes=(1, 0))
        u += 0.5 * self.force.reshape(3, 1, 1, 1)
        u /= rho
        u[:, self.walls] = 0.0
        return u

    def mass(self) -> float:
        """Total mass of the fluid cells (outlet cells included), ``sum_x sum_q f_q``."""
        f = self.distributions()
        return float(f[:, ~self.walls].sum())

    def momentum(self) -> np.ndarray:
        """Total ``sum_x sum_q f_q c_q`` over the fluid cells (without the force's
        half-step share)."""
        f = self.distributions()[:, ~self.walls]
        return C.T.astype(np.float64) @ f.sum(axis=1)

    def force_on(self, body=None) -> np.ndarray:
        """Momentum-exchange force on the solid cells ``body`` (bool mask, default all
        solid cells) in the last step (``t >= 1``): with half-way bounce-back on resting
        walls each link from a fluid cell ``x`` to a body cell ``x + c_q`` carries
        ``2 c_q f*_q(x)``, and ``f*_q(x)`` of the last step is the reflected
        ``f_OPP[q](x)`` at time ``t`` (Ladd, J. Fluid Mech. 271, 1994)."""
        if self.t < 1:
            raise ValueError("force_on needs at least one step (t >= 1)")
        body = self.solid if body is None else np.asarray(body, dtype=bool)
        if body.shape != self.shape or np.any(body & ~self.solid):
            raise ValueError("body must be a mask of solid cells of the grid's shape")
        f = self.distributions()
        fluid = ~self.walls
        force = np.zeros(3)
        for q in range(1, Q):
            shift = tuple(-int(s) for s in C[q])
            links = fluid & np.roll(body, shift, axis=(0, 1, 2))  # body[x + c_q]
            force += 2.0 * C[q] * f[OPP[q]][links].sum()
        return force
