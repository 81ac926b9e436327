"""RRB-preconditioned conjugate gradients for symmetric 5-point operators.

:class:`RRBSolver` factorises once (:func:`.build.build_levels`) and then solves
``A x = b`` any number of times.  CG runs on the level-1 **red** nodes with the exact
Schur complement ``S = A_RR - A_RB D_B^{-1} A_BR`` (a 9-point operator; the black
unknowns are recovered afterwards), preconditioned by the rest of the RRB factorisation
``M = L D L^T``.  Iterations stop when the relative ``M^{-1}``-norm of the residual

.. math:: \\sqrt{r_k^T M^{-1} r_k} \\le \\mathrm{tol} \\, \\sqrt{b_S^T M^{-1} b_S}

holds (``b_S`` the Schur right-hand side), which costs nothing extra: ``r^T z`` is
needed by CG anyway and is fused into the last preconditioner kernel.

References: M. de Jong, C. Vuik, "GPU implementation of the RRB-solver for the
linearized Boussinesq equations", report 14-01 / Comp. & Fluids (2017); C.W. Brand,
"An incomplete-factorization preconditioning using repeated red-black ordering",
Numer. Math. 61 (1992) 433-454.
"""

from __future__ import annotations

import math
import time

import numpy as np

from forestpy.backend import get_backend

from . import kernels as K
from .build import build_levels, check_stencil
from .ordering import from_quarters, quarter_shape, to_quarters

__all__ = ["RRBSolver", "solve", "stencil_poisson", "apply_stencil", "COARSE_NODES"]

# The default stopping level: the first level with at most this many nodes, solved
# exactly (its black nodes eliminated, a dense inverse of the red Schur complement).
# On the GPU a small level's four kernels cost their latency whatever their size,
# while one read of a dense inverse of a few thousand red nodes (int16 fixed point) is
# one bandwidth-bound kernel, and the exact coarse solve saves iterations (1.5 M
# unknowns: 4 instead of 5 at tol 1e-3, 16 instead of 20 at 1e-8 against <= 1024
# nodes; docs/rrb.md).  On the CPU the dense product costs its arithmetic.
COARSE_NODES = {"cpu": 64, "gpu": 6400}


def stencil_poisson(nx: int, ny: int, hx: float = 1.0, hy: float | None = None):
    """5-point ``-Laplace`` on ``nx x ny`` interior nodes with Dirichlet boundaries
    (boundary values go to the right-hand side); returns ``(c, e, n)``."""
    hy = hx if hy is None else hy
    c = np.full((ny, nx), 2.0 / hx**2 + 2.0 / hy**2)
    e = np.full((ny, nx), -1.0 / hx**2)
    n = np.full((ny, nx), -1.0 / hy**2)
    e[:, -1] = 0.0
    n[-1, :] = 0.0
    return c, e, n


def apply_stencil(stencil, x):
    """``A x`` for a 5-point stencil ``(c, e, n)`` and a natural ``(ny, nx)`` array."""
    c, e, n = stencil
    y = c * x
    y[:, :-1] += e[:, :-1] * x[:, 1:]
    y[:, 1:] += e[:, :-1] * x[:, :-1]
    y[:-1, :] += n[:-1, :] * x[1:, :]
    y[1:, :] += n[:-1, :] * x[:-1, :]
    return y


class RRBSolver:
    """RRB-k preconditioned CG for one 5-point SPD operator.

    Parameters
    ----------
    stencil : (c, e, n)
        Diagonal, east and north couplings, arrays of shape ``(ny, nx)``.
    level : int, optional
        Level ``k`` at which the rest is factorised completely (``2 <= k <=
        1 + floor(log2(max(nx, ny)))``); default: the first level with at most
        ``COARSE_NODES[backend]`` nodes (64 on the CPU, 6400 on the GPU).
    backend : "cpu" | "gpu" | Backend
        Where the factorisation lives and the iterations run.  On the GPU every array
        stays on the device (Numba-CUDA kernels, one thread per quarter node).
    lumping : "stencil" | "diagonal"
        How the fill-in is lumped back to 5 points (:func:`.build._lump`).
    factors : "float32" | "float64"
        Storage precision of the preconditioner's factors (computations stay float64;
        :func:`.build._store_factors`).  float32 halves what an application reads and
        keeps the preconditioner exactly symmetric positive definite; float64 makes it
        the exact ``L D L^T`` of the lumped factorisation to round-off.

    Examples
    --------
    >>> import numpy as np
    >>> from forestpy.solvers.rrb import RRBSolver, stencil_poisson
    >>> st = stencil_poisson(31, 31)
    >>> x, info = RRBSolver(st).solve(np.ones((31, 31)), tol=1e-10)
    >>> bool(info["converged"]), info["iterations"] < 20
    (True, True)
    """

    def __init__(self, stencil, level: int | None = None, backend="cpu", lumping="stencil",
                 factors="float32"):
        self.stencil = check_stencil(stencil)
        self.ny, self.nx = self.stencil[0].shape
        self.backend = get_backend(backend)
        coarse = COARSE_NODES["gpu" if self.backend.is_gpu else "cpu"]
        data = build_levels(self.stencil, level, lumping, coarse_nodes=coarse, factors=factors)
        self.levels = data["levels"]
        self.max_levels = data["max_levels"]
        self.shapes = data["shapes"]
        self.quarter_shape = quarter_shape(self.nx, self.ny)
        self._host = data
        if self.backend.is_gpu:
            from .gpu_kernels import GPUSolverState

            self._gpu = GPUSolverState(data)
            self._lv = None
        else:
            self._gpu = None
            self._lv = self._cpu_state(data)

    # ------------------------------------------------------------------ CPU state
    @staticmethod
    def _cpu_state(data):
        h, w = quarter_shape(*data["shape"])
        W = [None]
        for nx, ny in data["shapes"][1:-1]:
            hh, ww = quarter_shape(nx, ny)
            W.append(np.zeros((4, hh, ww)))
        hk, wk = quarter_shape(*data["shapes"][-1])
        lv = {
            "S9": np.ascontiguousarray(data["schur9"]),
            "P": [np.ascontiguousarray(p) for p in data["rot"]],
            "BL": [np.ascontiguousarray(b) for b in data["black"]],
            "BLlast": np.ascontiguousarray(data["last_black"]),
            "W": W,
            "Wlast": np.zeros((4, hk, wk)),
            "Xlast": np.zeros((4, hk, wk)),
            "Minv": np.ascontiguousarray(data["last_inv"]),
            "Dlast": np.ascontiguousarray(data["last_scale"]),
            "vec": {k: np.zeros((2, h, w)) for k in ("x", "r", "z", "p", "q")},
            "full": np.zeros((4, h, w)),
        }
        return lv

    @property
    def n_unknowns(self) -> int:
        return self.nx * self.ny

    # ------------------------------------------------------------------ operators
    def matvec(self, x):
        """``A x`` (host, natural ordering)."""
        return apply_stencil(
            self.stencil, np.asarray(x, dtype=np.float64).reshape(self.ny, self.nx)
        )

    def precondition(self, b):
        """``M^{-1} b`` of the full-system RRB preconditioner (host, natural ordering).

        Black step of level 1, the red preconditioner, black back-substitution: the
        ``L D L^T`` of the whole grid with the lumped level-1 Schur complement.
        """
        b = np.asarray(b, dtype=np.float64).reshape(self.ny, self.nx)
        if self._gpu is not None:
            return self._gpu.precondition_full(b, self.nx, self.ny)
        lv = self._lv
        y = to_quarters(b)
        K.black_forward(lv["BL"][0], y)
        r = np.ascontiguousarray(y[:2])
        z = np.zeros_like(r)
        K.precondition_cpu(lv, r, z)
        y[:2] = z
        K.black_backward(lv["BL"][0], y, y)
        return from_quarters(y, self.nx, self.ny)

    def aslinearoperator(self, which: str = "preconditioner"):
        """A ``scipy.sparse.linalg.LinearOperator`` on flat natural-order vectors:
        ``"preconditioner"`` (``M^{-1}``, for ``scipy.sparse.linalg.cg(..., M=...)``),
        ``"operator"`` (``A``) or ``"solve"`` (``A^{-1}`` by RRB-PCG, tol 1e-10)."""
        from scipy.sparse.linalg import LinearOperator

        N = self.n_unknowns
        if which == "preconditioner":

            def f(v):
                return self.precondition(v).ravel()
        elif which == "operator":

            def f(v):
                return self.matvec(v).ravel()
        elif which == "solve":

            def f(v):
                return self.solve(np.asarray(v).reshape(self.ny, self.nx), tol=1e-10)[0].ravel()
        else:
            raise ValueError(f"unknown operator {which!r}; valid: preconditioner, operator, solve")
        return LinearOperator((N, N), matvec=f, rmatvec=f, dtype=np.float64)

    # ------------------------------------------------------------------ solve
    def solve(self, rhs, x0=None, tol: float = 1e-8, maxiter: int = 500, out=None):
        """Solve ``A x = rhs``; returns ``(x, info)`` with natural ``(ny, nx)`` x.

        ``x0`` warm-starts the red unknowns.  ``out``: a float64 ``(ny, nx)`` array of
        the backend that receives x (and is returned); it may be ``x0``.  ``info``:
        ``iterations``, ``converged``, ``residual`` (final relative M^-1 norm),
        ``history`` (per iteration), ``time_s``.  On the GPU backend ``rhs``/``x0``/``x``
        are device arrays; when the same ``rhs`` / ``x0`` / ``out`` arrays come back
        solve after solve (a time loop), the solve's CUDA graphs read and write them in
        place instead of copying them through the solver's own buffers.  An input
        error leaves ``out`` unchanged.
        """
        t0 = time.perf_counter()  # info["time_s"]: the whole call, checks included
        if not tol > 0:
            raise ValueError(f"tol must be positive, got {tol!r}")
        xp = self.backend.xp
        rhs = xp.asarray(rhs, dtype=xp.float64)
        if rhs.shape != (self.ny, self.nx):
            raise ValueError(f"rhs has shape {rhs.shape}, the operator is {(self.ny, self.nx)}")
        if x0 is not None:
            x0 = xp.asarray(x0, dtype=xp.float64)
            if x0.shape != (self.ny, self.nx):
                raise ValueError(f"x0 has shape {x0.shape}, the operator is {(self.ny, self.nx)}")
        if out is not None and (
            not isinstance(out, xp.ndarray) or out.dtype != xp.float64
            or out.shape != (self.ny, self.nx)
        ):
            raise ValueError(
                f"out must be a float64 {xp.__name__} array of shape {(self.ny, self.nx)}, "
                f"got {type(out).__name__} {getattr(out, 'dtype', '')} "
                f"{getattr(out, 'shape', '')}"
            )
        if self._gpu is not None:
            return self._gpu.solve(rhs, x0, tol, maxiter, self.nx, self.ny, out=out, t0=t0)
        x, info = self._solve_cpu(rhs, x0, tol, maxiter, t0)
        if out is None:
            return x, info
        out[...] = x
        return out, info

    def _solve_cpu(self, rhs, x0, tol, maxiter, t0):
        for name, a in (("rhs", rhs), ("x0", x0)):
            if a is not None and not np.isfinite(a).all():
                raise ValueError(f"RRB solve: {name} has non-finite values (NaN or inf)")
        lv = self._lv
        v = lv["vec"]
        x, r, z, p, q = v["x"], v["r"], v["z"], v["p"], v["q"]
        full = lv["full"]
        full[:] = to_quarters(rhs)
        K.black_forward(lv["BL"][0], full)  # Schur right-hand side in full[:2]
        bS = full[:2]
        if x0 is None:
            x[:] = 0.0
            r[:] = bS
            rz = K.precondition_cpu(lv, r, z)
            normb = math.sqrt(max(rz, 0.0))
        else:
            x[:] = to_quarters(x0)[:2]
            z[:] = bS
            normb = math.sqrt(max(K.precondition_cpu(lv, z, p), 0.0))
            K.schur_matvec_dot(lv["S9"], x, q)
            r[:] = bS - q
            rz = K.precondition_cpu(lv, r, z)
        hist = []
        it = 0
        res = math.sqrt(max(rz, 0.0)) / normb if normb > 0 else 0.0
        converged = res <= tol
        p[:] = z
        xf, rf, pf, qf, zf = (
            x.reshape(-1),
            r.reshape(-1),
            p.reshape(-1),
            q.reshape(-1),
            z.reshape(-1),
        )
        while not converged and it < maxiter:
            pq = K.schur_matvec_dot(lv["S9"], p, q)
            alpha = rz / pq
            K.update_xr(xf, rf, pf, qf, alpha)
            rz_new = K.precondition_cpu(lv, r, z)
            it += 1
            res = math.sqrt(max(rz_new, 0.0)) / normb
            hist.append(res)
            if res <= tol:
                converged = True
                break
            K.update_p(pf, zf, rz_new / rz)
            rz = rz_new
        full[:2] = x
        K.black_backward(lv["BL"][0], to_quarters(rhs), full)
        out = from_quarters(full, self.nx, self.ny)
        return out, {
            "iterations": it,
            "converged": converged,
            "residual": res,
            "history": hist,
            "time_s": time.perf_counter() - t0,
        }


def solve(
    stencil,
    rhs,
    tol: float = 1e-8,
    level: int | None = None,
    backend="cpu",
    x0=None,
    maxiter: int = 500,
    lumping: str = "stencil",
    factors: str = "float32",
):
    """Solve ``A x = rhs`` for the 5-point SPD operator ``stencil = (c, e, n)``.

    One-shot convenience around :class:`RRBSolver`; returns ``(x, info)``.
    """
    return RRBSolver(stencil, level=level, backend=backend, lumping=lumping,
                     factors=factors).solve(
        rhs, x0=x0, tol=tol, maxiter=maxiter
    )
