r"""Linearised Variational Boussinesq Model (VBM) on a Cartesian grid.

Unknowns (cell centred): surface elevation :math:`\zeta`, surface velocity potential
:math:`\varphi` and the amplitude :math:`\psi` of the vertical structure of the
potential, :math:`\Phi(x, y, z, t) = \varphi + f(z)\,\psi` with the **parabolic
profile** :math:`f(z) = z + z^2 / (2h)` (so :math:`f(0) = 0`, :math:`f'(-h) = 0`).
Inserting it into Luke's variational principle, linearised about still water, gives
(Klopman, van Groesen & Dingemans, J. Fluid Mech. 657 (2010) 36-63; de Jong & Vuik,
MARIN real-time simulator):

.. math::

    \partial_t \zeta + \nabla\cdot(h \nabla\varphi - D \nabla\psi) &= 0, \\
    \partial_t \varphi + g \zeta &= -P_s / \rho, \\
    M \psi - \nabla\cdot(N \nabla\psi) &= -\nabla\cdot(D \nabla\varphi),

with :math:`D = -\int_{-h}^0 f\,dz = h^2/3`, :math:`M = \int f'^2 dz = h/3` and
:math:`N = \int f^2 dz = 2h^3/15`.  Plane waves then obey
:math:`\omega^2 = g h k^2 (1 + (kh)^2/15) / (1 + 2 (kh)^2/5)`, the (2,2) Padé
approximation of :math:`g k \tanh kh` (1 % accurate up to :math:`kh \approx 2`).

Discretisation: second-order finite volumes (face depths the mean of the two cells,
zero across walls and into land), symplectic leapfrog in time (:math:`\zeta` at whole,
:math:`\varphi, \psi` at half steps), one RRB-PCG solve per frame for the SPD
:math:`\psi` operator, warm-started from the last frame.  Walls reflect (no flux);
a sponge layer damps :math:`\zeta, \varphi` towards rest near chosen sides.  A ship is a
moving pressure pulse :math:`P_s` (cos² in length and beam) on a prescribed path.
"""

from __future__ import annotations

import math
import time

import numpy as np
from forestpy.solvers.rrb import RRBSolver

from forestpy.backend import get_backend
from forestpy.callbacks import report_start, report_step
from forestpy.options import Option

from .kernels import frame_args, frame_cpu, frame_gpu

__all__ = ["VBM", "profile_coefficients", "dispersion_omega", "ship_pressure",
           "solver_options"]


def solver_options(out: str) -> dict:
    """The typed options every VBM demo shares (time step, RRB-PCG, backend, output
    folder ``out``), for a demo's ``OPTIONS``."""
    return dict(
        cfl=Option(0.8, "Courant number of the leapfrog frames", min=0.0, max=1.0,
                   min_inclusive=False),
        tol=Option(1e-6, "relative tolerance of the RRB-PCG solve per frame", min=0.0,
                   max=1.0, min_inclusive=False),
        rrb_level=Option(None, "RRB level at which the remaining system is factorised "
                         "completely (None: the first level with <= 64 nodes)",
                         type=int, min=2, none_ok=True),
        backend=Option("cpu", "cpu or gpu", choices=("cpu", "gpu")),
        out=Option(out, "output folder"),
    )


def profile_coefficients(h, kappa=None):
    """``(D, M, N)`` for depth ``h`` (arrays or scalars).

    ``kappa=None``: the parabolic profile, ``D = h^2/3``, ``M = h/3``, ``N = 2h^3/15``.
    ``kappa > 0``: the cosh profile ``f(z) = cosh(kappa (z+h)) / cosh(kappa h) - 1``
    (Klopman et al. 2010, section 3.2), whose VBM dispersion relation is exact at
    ``k = kappa``: ``D = h - tanh(kappa h)/kappa``,
    ``M = kappa^2 (sinh(2 kappa h)/(4 kappa) - h/2) / cosh^2(kappa h)``,
    ``N = (h/2 + sinh(2 kappa h)/(4 kappa)) / cosh^2(kappa h) - 2 tanh(kappa h)/kappa + h``
    (written overflow-free; land, ``h = 0``, gives zeros).
    """
    h = np.asarray(h, dtype=np.float64)
    if kappa is None:
        return h * h / 3.0, h / 3.0, 2.0 * h**3 / 15.0
    if not kappa > 0:
        raise ValueError(f"kappa must be positive, got {kappa!r}")
    a = kappa * h
    T = np.tanh(a)
    e = np.exp(-2.0 * a)
    sech2 = 4.0 * e / (1.0 + e) ** 2  # 1 / cosh^2
    D = h - T / kappa
    M = 0.5 * kappa * (T - a * sech2)  # sinh(2a) / (2 cosh^2 a) = tanh(a)
    N = 0.5 * h * sech2 + 0.5 * T / kappa - 2.0 * T / kappa + h
    return D, M, N


def dispersion_omega(k, h, g=9.81, kappa=None):
    """Angular frequency of the linear VBM (continuous) for either profile:
    ``w^2 = g k^2 (h - D^2 k^2 / (M + N k^2))``."""
    k = np.asarray(k, dtype=np.float64)
    if kappa is None:
        kh2 = (k * h) ** 2
        return np.sqrt(g * h * k * k * (1 + kh2 / 15.0) / (1 + 0.4 * kh2))
    D, M, N = profile_coefficients(h, kappa)
    return np.sqrt(g * k * k * (h - D * D * k * k / (M + N * k * k)))


def ship_pressure(X, Y, xs, ys, heading, length, beam, p0, xp=np):
    """cos² pressure pulse of peak ``p0`` centred at ``(xs, ys)`` along ``heading``."""
    ca, sa = math.cos(heading), math.sin(heading)
    xi = (X - xs) * ca + (Y - ys) * sa
    eta = -(X - xs) * sa + (Y - ys) * ca
    fx = xp.where(xp.abs(xi) < 0.5 * length, xp.cos(math.pi * xi / length) ** 2, 0.0)
    fy = xp.where(xp.abs(eta) < 0.5 * beam, xp.cos(math.pi * eta / beam) ** 2, 0.0)
    return p0 * fx * fy


class VBM:
    """Linearised VBM on ``depth[ny, nx]`` cells of size ``dx x dy``.

    Parameters
    ----------
    depth : array (ny, nx)
        Still-water depth; cells with ``depth <= 0`` are land (walls).
    dx, dy : float
        Cell sizes; the domain's lower-left corner is ``origin``.
    path : callable ``t -> (x, y, heading)`` or None
        Ship position (m) and heading (radians); None: no ship.
    ship : dict
        ``length``, ``beam``, ``p0`` (peak pressure / rho, m^2/s^2), ``ramp`` (s).
    sponge : dict
        Width (m) of the absorbing layer per side ``{"west": 50, ...}`` and ``strength``
        (1/s, the damping rate at the outer edge; quadratic ramp).
    dt : float, optional
        Time step; default ``cfl`` times the leapfrog limit
        ``1 / (sqrt(g h_max) sqrt(dx^-2 + dy^-2))``.
    backend : "cpu" | "gpu"
        Fields and the RRB solver live there.
    rrb_level, tol : RRB stopping level and the relative M^-1-norm tolerance.
    kappa : float, optional
        None: parabolic vertical profile; a wave number: the cosh profile tuned to it
        (:func:`profile_coefficients`), exact dispersion at ``k = kappa``.
    """

    def __init__(
        self,
        depth,
        dx,
        dy=None,
        origin=(0.0, 0.0),
        g=9.81,
        path=None,
        ship=None,
        sponge=None,
        dt=None,
        cfl=0.8,
        backend="cpu",
        rrb_level=None,
        tol=1e-6,
        kappa=None,
    ):
        depth = np.asarray(depth, dtype=np.float64)
        if depth.ndim != 2 or min(depth.shape) < 2:
            raise ValueError(f"depth must be a 2D array of at least 2 x 2 cells, got {depth.shape}")
        if not np.isfinite(depth).all():
            raise ValueError("depth must be finite")
        dy = dx if dy is None else dy
        if not (dx > 0 and dy > 0):
            raise ValueError(f"cell sizes must be positive, got dx={dx}, dy={dy}")
        self.backend = get_backend(backend)
        xp = self.backend.xp
        self.xp = xp
        self.g, self.dx, self.dy = float(g), float(dx), float(dy)
        self.ny, self.nx = depth.shape
        wet = depth > 0
        if not wet.any():
            raise ValueError("depth has no wet cell")
        h = np.where(wet, depth, 0.0)
        # face depths (zero across walls and into land); last column / row: outer walls
        hx = np.zeros_like(h)
        hx[:, :-1] = np.where(wet[:, :-1] & wet[:, 1:], 0.5 * (h[:, :-1] + h[:, 1:]), 0.0)
        hy = np.zeros_like(h)
        hy[:-1, :] = np.where(wet[:-1, :] & wet[1:, :], 0.5 * (h[:-1, :] + h[1:, :]), 0.0)
        Dx, _, Nx = profile_coefficients(hx, kappa)
        Dy, _, Ny = profile_coefficients(hy, kappa)
        _, Mc, _ = profile_coefficients(h, kappa)
        self.kappa = kappa
        # psi operator: M psi - div(N grad psi); land cells: identity
        c = Mc + Nx / dx**2 + Ny / dy**2
        c[:, 1:] += Nx[:, :-1] / dx**2
        c[1:, :] += Ny[:-1, :] / dy**2
        c = np.where(wet, c, 1.0)
        self.stencil = (c, -Nx / dx**2, -Ny / dy**2)
        self.solver = RRBSolver(self.stencil, level=rrb_level, backend=self.backend)
        self.tol = float(tol)
        hmax = float(h.max())
        self.dt_max = 1.0 / (math.sqrt(g * hmax) * math.sqrt(dx**-2 + dy**-2))
        self.dt = cfl * self.dt_max if dt is None else float(dt)
        if self.dt > self.dt_max:
            raise ValueError(f"dt={self.dt} exceeds the leapfrog stability limit {self.dt_max:.4g}")
        put = self.backend.to_device
        self.wet = put(wet.astype(np.float64))
        self.fx = {"h": put(hx / dx**2), "D": put(Dx / dx**2)}
        self.fy = {"h": put(hy / dy**2), "D": put(Dy / dy**2)}
        self.depth = h
        self.x = origin[0] + (np.arange(self.nx) + 0.5) * dx
        self.y = origin[1] + (np.arange(self.ny) + 0.5) * dy
        X, Y = np.meshgrid(self.x, self.y)
        self.path = path
        self.ship = {"length": 20.0, "beam": 5.0, "p0": 1.0, "ramp": 0.0, **(ship or {})}
        self.sigma = put(self._sponge(sponge or {}, X, Y, origin))
        self.zeta = xp.zeros((self.ny, self.nx))
        self.phi = xp.zeros((self.ny, self.nx))
        self.psi = xp.zeros((self.ny, self.nx))
        self._removed = xp.zeros(())
        # the explicit part: three per-cell passes (kernels.py), updating zeta and phi
        # in place; rhs of the psi solve and what the sponge takes per cell
        shape = (self.ny, self.nx)
        self._frame = frame_gpu(shape) if self.backend.is_gpu else frame_cpu(shape)
        self._xc, self._yc = put(self.x), put(self.y)
        self._rhs = xp.zeros(shape)
        self._taken = xp.zeros(shape)
        self.t = 0.0
        self.steps = 0
        self.cell_updates = 0
        self.iterations = []
        self.timers = {"solve": 0.0, "explicit": 0.0}

    def _sponge(self, sp, X, Y, origin):
        sp = dict(sp)
        strength = float(sp.pop("strength", 2.0))
        unknown = set(sp) - {"west", "east", "south", "north"}
        if unknown:
            raise KeyError(
                f"unknown sponge side(s) {sorted(unknown)}; valid: west, east, south, north"
            )
        x0, y0 = origin
        x1, y1 = x0 + self.nx * self.dx, y0 + self.ny * self.dy
        dist = {"west": X - x0, "east": x1 - X, "south": Y - y0, "north": y1 - Y}
        sigma = np.zeros_like(X)
        for side, width in sp.items():
            if width > 0:
                s = np.clip(1.0 - dist[side] / width, 0.0, 1.0)
                sigma = np.maximum(sigma, strength * s * s)
        return sigma

    # ------------------------------------------------------------------ operators
    def _div(self, F, u):
        """``div(F grad u)`` with face coefficients ``F`` (already divided by dx², dy²)."""
        xp = self.xp
        fx, fy = self.fx[F], self.fy[F]
        out = xp.zeros_like(u)
        gx = fx[:, :-1] * (u[:, 1:] - u[:, :-1])
        out[:, :-1] += gx
        out[:, 1:] -= gx
        gy = fy[:-1, :] * (u[1:, :] - u[:-1, :])
        out[:-1, :] += gy
        out[1:, :] -= gy
        return out

    def _ship(self, t):
        """``(xs, ys, heading, length, beam, p0)`` of the pulse at time ``t`` (p0 = 0
        without a path)."""
        s = self.ship
        if self.path is None:
            return 0.0, 0.0, 0.0, s["length"], s["beam"], 0.0
        xs, ys, hd = self.path(t)
        ramp = 1.0 if s["ramp"] <= 0 else min(1.0, t / s["ramp"])
        return xs, ys, hd, s["length"], s["beam"], s["p0"] * ramp

    def pressure(self, t):
        """Ship pressure / rho at time ``t`` (zero without a path)."""
        if self.path is None:
            return None
        return ship_pressure(self._xc[None, :], self._yc[:, None], *self._ship(t), xp=self.xp)

    def step(self):
        """One leapfrog frame: phi, psi (one RRB-PCG solve), zeta; sponge; returns the
        number of CG iterations."""
        t0 = time.perf_counter()
        F, fx, fy = self._frame, self.fx, self.fy
        par = frame_args(self.dt, self.g, *self._ship(self.t))
        F.phi(self.phi, self.zeta, self.sigma, self.wet, self._xc, self._yc, par)
        F.rhs(fx["D"], fy["D"], self.phi, self._rhs)
        self.backend.synchronize()
        t1 = time.perf_counter()
        # psi in place (out=x0): on the GPU the same three arrays every frame, which the
        # solve's graphs then read and write without copies
        self.psi, info = self.solver.solve(self._rhs, x0=self.psi, tol=self.tol, out=self.psi)
        self.backend.synchronize()
        t2 = time.perf_counter()
        F.zeta(fx["h"], fy["h"], fx["D"], fy["D"], self.phi, self.psi, self.zeta, self.sigma,
               self.wet, self._taken, par)
        # what the sponge took out (the fluxes conserve sum(zeta) to round-off)
        self._removed = self._removed + self._taken.sum()
        self.backend.synchronize()
        t3 = time.perf_counter()
        self.t += self.dt
        self.steps += 1
        self.cell_updates += self.zeta.size
        self.iterations.append(info["iterations"])
        self.timers["solve"] += t2 - t1
        self.timers["explicit"] += (t1 - t0) + (t3 - t2)
        if not info["converged"]:
            raise RuntimeError(f"RRB-PCG did not converge in frame {self.steps}")
        report_step(self)
        return info["iterations"]

    def frame_fields(self) -> dict:
        """The fields for a ParaView frame (:class:`forestpy.io.vtk.GridOutput`): surface
        elevation ``zeta``, potentials ``phi``, ``psi``, the still-water depth."""
        host = self.backend.to_host
        return {"fields": {"zeta": host(self.zeta), "phi": host(self.phi),
                           "psi": host(self.psi),
                           "still_water_depth": np.asarray(host(self.depth))},
                "lower": (float(self.x[0] - 0.5 * self.dx), float(self.y[0] - 0.5 * self.dy)),
                "spacing": (self.dx, self.dy),
                "units": {"x": "m", "y": "m", "t": "s", "zeta": "m", "phi": "m2 s-1",
                          "psi": "m2 s-1", "still_water_depth": "m"}}

    def run(self, t_final):
        self.t_final = float(t_final)
        report_start(self, t_final)
        while self.t < t_final - 1e-12 * max(1.0, t_final):
            self.step()
        return self

    def mass(self):
        """``(volume, removed)``: ``sum(zeta) dx dy`` and the volume the sponge has
        taken out so far; ``volume + removed`` stays at its initial value (round-off)."""
        a = self.dx * self.dy
        return float(self.zeta.sum()) * a, float(self._removed) * a

    def energy(self):
        """Discrete energy ``sum(g zeta^2 - phi div(h grad phi - D grad psi)) dx dy / 2``
        (conserved by the leapfrog, up to its staggering, without forcing or sponge)."""
        kin = -(self.phi * (self._div("h", self.phi) - self._div("D", self.psi))).sum()
        pot = self.g * (self.zeta * self.zeta).sum()
        return float(0.5 * (pot + kin) * self.dx * self.dy)

    def field(self, name="zeta"):
        return self.backend.to_host(getattr(self, name))
