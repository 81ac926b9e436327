r"""Hooks written once for both backends: the context they receive, pointwise sources
and boundaries.

A hook (a split source term, a boundary condition, a boundary forcing) sees a
simulation only through a :class:`HookContext`: the geometry of the patches it
updates (on the backend), their cell centres, the time and the time step, the
backend, the patches of the call (``rows``: one level of a subcycled step) and a
reduction over the MPI ranks.  It never reads the :class:`~forestpy.simulation.Simulation`.

Pointwise hooks
---------------
A source term is a function of one cell, compiled by forestpy into a CPU ``prange``
loop and into a CUDA kernel (the Riemann solvers' way: :mod:`forestpy.vtable`):

.. code-block:: python

    def decay(q, aux, x, y, t, dt, params):       # q: the cell's components, in place
        q[0] *= math.exp(-params[0] * dt)

    sim = Simulation(..., src2=pointwise_source(decay, params=[0.5]))

and a boundary condition a function of one ghost cell of a side (``side`` 0..3:
x_lower, x_upper, y_lower, y_upper):

.. code-block:: python

    def inflow(side, q, q_in, aux, x, y, t, params):   # q: the ghost cell, in place
        q[0] = params[0]                                # q_in: its mirror inside
        q[1] = params[0] * params[1]
        q[2] = 0.0

    sim = Simulation(..., bc=("extrap", pointwise_boundary(inflow, params=[1.0, 0.2]),
                              "wall", "wall"))

The function follows the rules of a Riemann solver: scalar arithmetic, ``math``
functions, indexing of the arrays it gets, calls of ``numba.njit`` functions; no
allocation, no globals but constants and ``numba.njit`` functions; ``params`` (a
float64 array given once) read-only.  ``q`` (``num_eqn``) and ``aux`` (``num_aux``)
are copies of the cell's values (``q`` written back); ``x``, ``y`` the cell centre.
An optional host function ``value(t) -> float`` (a forcing amplitude interpolated
from a time series, a tide level) is called once per call and its result passed to
the function as a last argument.  The same function runs on both backends and gives
the same values up to round-off (the GPU fuses multiply-adds).

:class:`~forestpy.patches.launch.PatchReduction` bodies with
:func:`~forestpy.patches.launch.for_each_patch` do the same for sources that need
sums over a patch (GeoClaw's positivity fix: :mod:`forestpy.extensions.geoclaw.sources`).

The array-level slow path
-------------------------
Any callable ``src2(q, aux, x, y, t, dt)`` (arrays of all patches of the call, NumPy or
CuPy) and any boundary callable ``fn(side, q, aux, x, y, t)``
(:mod:`forestpy.patches.boundary`) still work: they are run as array operations of the
backend's array module, tens of launches and a gather/scatter per call on a GPU where a
pointwise hook is one kernel.  A hook object with ``takes_context = True`` and a
method ``apply(q, aux, context)`` (sources) or ``apply_side(side, q, aux, idx,
context)`` (boundaries) gets the context instead; the pointwise hooks here are such
objects.
"""

from __future__ import annotations

import numba
import numpy as np
from numba.core.registry import CPUDispatcher

from forestpy.patches.launch import for_each_cell, for_each_entry
from forestpy.step_params import device_scalar

__all__ = ["HookContext", "HookGeometry", "PointwiseBoundary", "PointwiseSource",
           "pointwise_boundary", "pointwise_source", "takes_context"]


def takes_context(hook) -> bool:
    """Whether ``hook`` is called with a :class:`HookContext` (``takes_context``)."""
    return bool(getattr(hook, "takes_context", False))


class HookGeometry:
    """The geometry of the patches (rows) a hook receives, as backend arrays made on
    first use and kept until the next regrid (a new object then).

    Attributes: ``host`` (the :class:`~forestpy.patches.geometry.PatchGeometry`),
    ``backend``, ``mx``, ``my``, ``mbc``, ``npatch``; per patch the float64 backend
    arrays ``dx``, ``dy``, ``xlower``, ``ylower`` (lower-left corner of the interior)
    and the int64 ``level``; ``centers`` / ``centers_host``: the cell centres ``(x,
    y)`` of every cell, ghost cells included, ``(npatch, NY, NX)`` each.  The centre
    of interior cell ``(j, i)`` (from 0) of patch ``k`` is ``xlower[k] + dx[k] * (i +
    0.5)``, as the kernels of the pointwise hooks compute it.
    """

    def __init__(self, geom, backend, dx=None, dy=None, centers_host=None, centers=None):
        self.host, self.backend = geom, backend
        self.mx, self.my, self.mbc, self.npatch = geom.mx, geom.my, geom.mbc, geom.npatch
        self._arrays = {"dx": dx, "dy": dy}
        self._centers_host, self._centers = centers_host, centers

    def _array(self, name):
        a = self._arrays.get(name)
        if a is None:
            a = self._arrays[name] = self.backend.to_device(np.ascontiguousarray(
                getattr(self.host, name)))
        return a

    dx = property(lambda self: self._array("dx"))
    dy = property(lambda self: self._array("dy"))
    xlower = property(lambda self: self._array("xlower"))
    ylower = property(lambda self: self._array("ylower"))
    level = property(lambda self: self._array("level"))

    @property
    def area(self):
        """Cell area per patch, ``dx * dy`` (backend array)."""
        a = self._arrays.get("area")
        if a is None:
            a = self._arrays["area"] = self.dx * self.dy
        return a

    @property
    def centers_host(self):
        if self._centers_host is None:
            self._centers_host = self.host.cell_centers(ghosts=True)
        c = self._centers_host
        return c() if callable(c) else c

    @property
    def centers(self):
        if self._centers is None:
            self._centers = tuple(self.backend.to_device(c) for c in self.centers_host)
        c = self._centers
        return c() if callable(c) else c


class HookContext:
    """What a hook sees of the simulation at one call.

    Attributes
    ----------
    geometry : HookGeometry
        The patches of the arrays the hook receives (their rows).
    backend, xp :
        The backend and its array module.
    t, dt : float
        Time at the start of the step (or of the ghost fill) and the step (0 for
        boundaries).
    rows, rows_host : int64 arrays or None
        The rows the call updates (backend and host copies): one level of a subcycled
        step; None: every owned row.
    owned : int
        The owned rows, first in the geometry (a distributed run's halo rows follow).
    comm :
        The MPI communicator of a distributed run, None on one rank.
    step, rejected : int
        Accepted and rejected steps before this call: a hook that counts something
        per step (a volume added) keeps the count of a call until a later call (or a
        read) sees ``step`` advanced, and drops it when the step was retaken.
    step_params : forestpy.step_params.StepParams or None
        On a GPU, the block the kernels read per-step values from (``t``, ``dt``, a
        forcing's value): a hook whose kernel arguments change from step to step puts
        them there (:meth:`~forestpy.step_params.StepParams.values`) so that a step
        captured as a CUDA graph replays with new ones.  None on the CPU.
    """

    def __init__(self, geometry: HookGeometry, t: float, dt: float = 0.0, *, rows=None,
                 rows_host=None, owned: int | None = None, comm=None, step: int = 0,
                 rejected: int = 0, step_params=None):
        self.geometry = geometry
        self.owned = geometry.npatch if owned is None else int(owned)
        self.backend = geometry.backend
        self.xp = self.backend.xp
        self.t, self.dt = float(t), float(dt)
        self.rows = rows
        self.rows_host = rows_host if rows_host is not None or rows is None else \
            self.backend.to_host(rows)
        self.comm = comm if comm is not None and comm.size > 1 else None
        self.step, self.rejected = int(step), int(rejected)
        self.step_params = step_params if self.backend.is_gpu else None

    @property
    def capturing(self) -> bool:
        """Whether the call is being captured into a CUDA graph (its launches are
        recorded, not run): a hook keeps no host count then, and counts in its
        ``graph_replay(context)`` for every replay instead."""
        return self.step_params is not None and self.step_params.capturing

    @property
    def n(self) -> int:
        """Patches of the call: ``len(rows)``, or every owned row."""
        return self.owned if self.rows_host is None else len(self.rows_host)

    def allreduce(self, value, op: str = "sum"):
        """``value`` (a host number or NumPy array) summed (``op="sum"``) or maximised
        (``"max"``) over the ranks; ``value`` itself on one rank.  Collective: every
        rank's hook must call it."""
        if self.comm is None:
            return value
        from mpi4py import MPI

        return self.comm.allreduce(value, op={"sum": MPI.SUM, "max": MPI.MAX}[op])

    @classmethod
    def of_geometry(cls, geom, backend, t: float = 0.0, dt: float = 0.0) -> HookContext:
        """A context for ``geom`` on ``backend`` alone (every row, one rank): tests,
        direct calls; uploads its geometry."""
        return cls(HookGeometry(geom, backend), t, dt)


def _time_and_step(t, dt):
    return (t, dt)


def _params_on(cache: dict, params, backend):
    key = id(backend) if backend is not None and backend.is_gpu else None
    got = cache.get(key)
    if got is None or got[0] is not backend:
        host = np.ascontiguousarray(params, dtype=np.float64).reshape(-1)
        if host.size == 0:
            host = np.zeros(1)
        got = cache[key] = (backend, backend.to_device(host) if key is not None else host)
    return got[1]


def _jit(func):
    return func if isinstance(func, CPUDispatcher) else numba.njit(func)


def _generated(source: str, scope: dict):
    exec(source, scope)
    return numba.njit(inline="always")(scope["body"])


_SOURCE_BODY = """
def body(q, aux, xlower, ylower, dx, dy, t, dt, params, {value}k, j, i, mbc, qc, ac):
    J = mbc + j
    I = mbc + i
    for m in range({meqn}):
        qc[m] = q[k, m, J, I]
    for m in range({naux}):
        ac[m] = aux[k, m, J, I]
    x = xlower[k] + dx[k] * (i + 0.5)
    y = ylower[k] + dy[k] * (j + 0.5)
    cell(qc, ac, x, y, device_scalar(t), device_scalar(dt), params{last})
    for m in range({meqn}):
        q[k, m, J, I] = qc[m]
"""

_BOUNDARY_BODY = """
def body(q, aux, idx, side, mbc, xlower, ylower, dx, dy, t, params, {value}e, qg, qi, ag):
    ny = q.shape[2]
    nx = q.shape[3]
    along = ny if side < 2 else nx
    p = idx[e // (along * mbc)]
    pos = (e % (along * mbc)) // mbc
    g = e % mbc
    if side < 2:
        J = pos
        Ji = pos
        if side == 0:
            I = mbc - 1 - g
            Ii = mbc + g
        else:
            I = nx - mbc + g
            Ii = nx - mbc - 1 - g
    else:
        I = pos
        Ii = pos
        if side == 2:
            J = mbc - 1 - g
            Ji = mbc + g
        else:
            J = ny - mbc + g
            Ji = ny - mbc - 1 - g
    for m in range({meqn}):
        qg[m] = q[p, m, J, I]
        qi[m] = q[p, m, Ji, Ii]
    for m in range({naux}):
        ag[m] = aux[p, m, J, I]
    x = xlower[p] + dx[p] * ((I - mbc) + 0.5)
    y = ylower[p] + dy[p] * ((J - mbc) + 0.5)
    cell(side, qg, qi, ag, x, y, device_scalar(t), params{last})
    for m in range({meqn}):
        q[p, m, J, I] = qg[m]
"""


class _Pointwise:
    """A pointwise function, its parameters and its generated bodies (per sizes)."""

    takes_context = True

    def __init__(self, cell, params=(), value=None):
        if not callable(cell):
            raise TypeError(f"a pointwise hook needs a function, got {type(cell).__name__}")
        if value is not None and not callable(value):
            raise TypeError("value must be a function of t (or None)")
        self.cell = _jit(cell)
        self.params = np.array(params, dtype=np.float64).reshape(-1)
        self.value = value
        self._step_values = _time_and_step if value is None else (
            lambda t, dt: (t, dt, float(value(t))))
        self._bodies: dict = {}
        self._params: dict = {}

    def _body(self, template: str, meqn: int, naux: int):
        key = (meqn, naux)
        body = self._bodies.get(key)
        if body is None:
            has_value = self.value is not None
            source = template.format(meqn=meqn, naux=naux, value="v, " if has_value else "",
                                     last=", device_scalar(v)" if has_value else "")
            body = self._bodies[key] = _generated(source, {"cell": self.cell,
                                                           "device_scalar": device_scalar})
        return body

    def _per_step(self, context: HookContext) -> tuple:
        """``(t, dt, params[, v])`` of a call: numbers on the CPU; on a GPU ``t``,
        ``dt`` and ``v`` are views of the step's parameter block
        (:mod:`forestpy.step_params`), so that a captured step replays with new ones."""
        params = _params_on(self._params, self.params, context.backend)
        value = self.value
        block = context.step_params
        if block is None:
            extra = (float(value(context.t)),) if value is not None else ()
            return (context.t, context.dt, params) + extra
        v = block.values((self, "per step"), self._step_values, context.t, context.dt)
        return (v[0:1], v[1:2], params) + ((v[2:3],) if value is not None else ())


    def graph_replay(self, context: HookContext) -> None:
        """A pointwise hook keeps no count: nothing to do for a replayed step."""


class PointwiseSource(_Pointwise):
    """A ``src2`` hook from a function of one cell, ``cell(q, aux, x, y, t, dt, params[,
    v])`` (see the module docstring), compiled for the CPU and the GPU: one launch per
    call over the interior cells of the call's patches."""

    def apply(self, q, aux, context: HookContext) -> None:
        """Update the interiors of the rows ``context.rows`` (all rows when None) of
        ``q`` in place."""
        g = context.geometry
        meqn, naux = q.shape[1], aux.shape[1]
        body = self._body(_SOURCE_BODY, meqn, naux)
        for_each_cell(body, context.n, g.my, g.mx, g.mbc, q, aux, g.xlower, g.ylower, g.dx,
                      g.dy, *self._per_step(context),
                      backend=context.backend, rows=context.rows,
                      scratch=(meqn, max(naux, 1)))

    def __call__(self, q, aux, x, y, t, dt):
        raise TypeError("a pointwise source runs through a Simulation (src2=...), which "
                        "calls apply(q, aux, context)")


class PointwiseBoundary(_Pointwise):
    """A boundary condition from a function of one ghost cell, ``cell(side, q, q_in,
    aux, x, y, t, params[, v])`` (see the module docstring): ``q`` the ghost cell's
    components (written back), ``q_in`` those of its mirror image inside the patch
    (ghost layer ``g`` from the boundary mirrors interior layer ``g``), ``aux`` the
    ghost cell's.  One launch per side over every ghost cell of the side's patches (for
    an x side all rows, ghost rows included, as Clawpack: corners then take the y
    sides' values)."""

    def apply_side(self, side: int, q, aux, idx, context: HookContext) -> None:
        """Fill the ghost cells of ``side`` of the patches ``idx`` (backend indices of
        rows of ``q``) in place."""
        g = context.geometry
        meqn = q.shape[1]
        naux = 0 if aux is None else aux.shape[1]
        if aux is None:
            aux = q[:, :0]
        body = self._body(_BOUNDARY_BODY, meqn, naux)
        along = q.shape[2] if side < 2 else q.shape[3]
        t, _, *extra = self._per_step(context)
        for_each_entry(body, len(idx) * along * g.mbc, q, aux, idx, side, g.mbc, g.xlower,
                       g.ylower, g.dx, g.dy, t, *extra,
                       backend=context.backend, scratch=(meqn, meqn, max(naux, 1)))

    def __call__(self, side, q, aux, x, y, t):
        # callable, so that every check for a user boundary (``callable(kind)``) sees it
        raise TypeError("a pointwise boundary runs through apply_physical_bc, which "
                        "calls apply_side(side, q, aux, idx, context)")


def pointwise_source(cell, params=(), value=None) -> PointwiseSource:
    """The ``src2`` hook running ``cell(q, aux, x, y, t, dt, params[, v])`` on every
    interior cell (see the module docstring); ``params``: float64 values given to every
    call; ``value(t)``: an optional host function whose result is the last argument.

    Examples
    --------
    >>> import math
    >>> def decay(q, aux, x, y, t, dt, params):
    ...     q[0] *= math.exp(-params[0] * dt)
    >>> hook = pointwise_source(decay, params=[0.5])
    >>> hook.takes_context
    True
    """
    return PointwiseSource(cell, params, value)


def pointwise_boundary(cell, params=(), value=None) -> PointwiseBoundary:
    """The boundary condition running ``cell(side, q, q_in, aux, x, y, t, params[, v])``
    on every ghost cell of a side (see the module docstring); pass it in ``bc`` for the
    sides it applies to."""
    return PointwiseBoundary(cell, params, value)
