"""The Clawpack wave-propagation solver as a forestpy solver: options -> vtable slots."""

from __future__ import annotations

import os

import numpy as np

from forestpy.patches.time_sync import apply_time_sync
from forestpy.precision import check_precision
from forestpy.vtable import RiemannSolver

from .fluctuations import make_fluctuation_kernel
from .limiters import LIMITERS
from .step_kernel import make_step_kernel

__all__ = ["ClawpackSolver"]


class ClawpackSolver:
    """Dimensionally unsplit wave propagation (LeVeque 1997) over a batch of patches.

    Parameters
    ----------
    riemann : RiemannSolver
    order : {1, 2}
    transverse_waves : {0, 1, 2}
        0: none; 1: transverse propagation of the fluctuations; 2: also of the
        second-order corrections.
    limiter : str or sequence of str
        One name for all waves or one per wave: none, minmod, superbee, vanleer, mc.
    capacity_index : int
        Index of the capacity function in ``aux`` (``-1``: none).
    backend : Backend, optional
        Where the arrays live; the GPU backend runs the CUDA kernels of
        :mod:`.gpu_kernel` (one block per patch) on device arrays.
    gpu_kernel : {"tile", "patch"}, optional
        The GPU step kernel: ``"tile"`` (default) the row-tile kernel of
        :mod:`.gpu_kernel`, ``"patch"`` the whole-patch kernel of
        :mod:`.gpu_patch_kernel` (same results, ``docs/gpu_kernel.md``).  Default: the
        environment variable ``FORESTPY_GPU_KERNEL``, else ``"tile"``.
    precision : {"float64", "float32", "mixed"}
        Arithmetic of the GPU step kernel (:mod:`forestpy.precision`): ``"float32"``
        all of it in FP32 (with FP32 storage, ``Simulation(dtype="float32")``),
        ``"mixed"`` the normal solve and the update in FP64, the limiter and the
        transverse terms in FP32.  The CPU kernel and the GPU whole-patch kernel
        compute in float64 only.
    """

    def __init__(
        self,
        riemann: RiemannSolver,
        *,
        order: int = 2,
        transverse_waves: int = 2,
        limiter="mc",
        capacity_index: int = -1,
        backend=None,
        gpu_kernel: str | None = None,
        precision: str = "float64",
    ):
        if order not in (1, 2):
            raise ValueError(f"order must be 1 or 2, got {order!r}")
        if transverse_waves not in (0, 1, 2):
            raise ValueError(f"transverse_waves must be 0, 1 or 2, got {transverse_waves!r}")
        if transverse_waves and riemann.rpt2 is None:
            raise ValueError(f"Riemann solver {riemann.name!r} has no rpt2: use transverse_waves=0")
        if not -1 <= capacity_index < max(riemann.num_aux, 0) and capacity_index != -1:
            raise ValueError(
                f"capacity_index={capacity_index} but the solver has {riemann.num_aux} aux fields"
            )
        names = [limiter] * riemann.num_waves if isinstance(limiter, str) else list(limiter)
        if len(names) != riemann.num_waves:
            raise ValueError(
                f"{len(names)} limiters given for {riemann.num_waves} waves of {riemann.name!r}"
            )
        for n in names:
            if n not in LIMITERS:
                raise ValueError(f"unknown limiter {n!r}; valid: {sorted(LIMITERS)}")
        if gpu_kernel is None:
            gpu_kernel = os.environ.get("FORESTPY_GPU_KERNEL", "tile")
        if gpu_kernel not in ("tile", "patch"):
            raise ValueError(f"gpu_kernel must be 'tile' or 'patch', got {gpu_kernel!r}")
        self.gpu_kernel = gpu_kernel
        self.precision = check_precision(precision)
        if self.precision != "float64":
            if backend is None or not backend.is_gpu:
                raise ValueError(f"precision={self.precision!r} needs the GPU backend (the "
                                 "CPU step kernel computes in float64)")
            if gpu_kernel != "tile":
                raise ValueError(f"precision={self.precision!r} needs gpu_kernel='tile' "
                                 "(the whole-patch kernel computes in float64)")
        self.riemann = riemann
        self.order = order
        self.transverse_waves = transverse_waves
        self.limiters = tuple(names)
        self.limiter_codes = np.array([LIMITERS[n] for n in names], dtype=np.int64)
        self.capacity_index = capacity_index
        self.backend = backend
        self.on_gpu = backend is not None and backend.is_gpu
        if self.on_gpu:
            from .gpu_kernel import make_gpu_fluctuation_kernel, make_gpu_time_sync

            self._fluct = make_gpu_fluctuation_kernel(riemann)
            self._time_sync_gpu = make_gpu_time_sync(riemann)
            self._limiter_codes_dev = backend.to_device(self.limiter_codes)
        else:
            self._kernel = make_step_kernel(
                riemann, order=order, transverse_waves=transverse_waves,
                capacity_index=capacity_index,
            )
            self._fluct = make_fluctuation_kernel(riemann)
        self.set_params(riemann.params_array())

    def set_params(self, params: np.ndarray) -> None:
        self.params = np.asarray(params, dtype=np.float64)
        # the parameters as the kernels take them (a device copy on the GPU)
        self.params_on_backend = (
            self.backend.to_device(self.params) if self.on_gpu else self.params
        )

    def step(self, q, aux, geom, dt, out=None, edge_out=None, rows=None, cfl_out=None):
        """One step of every patch: returns ``(q_new, cfl[npatch], edge_fluxes)``.

        ``geom`` needs ``mx, my, mbc`` and per-patch ``dx, dy`` arrays on the backend.
        ``out`` (the shape of ``q``, not ``q``) receives the new interiors, its ghost
        cells left as they are, and ``edge_out`` the edge fluxes: a caller stepping
        into its own arrays (the distributed step) saves a copy of the whole state.
        ``rows`` (int64 indices, backend array): step only these patches (one launch
        on the GPU), writing only their entries of ``out``, ``edge_out`` and
        ``cfl_out`` (all three required then): a level of a subcycled step.
        """
        if self.on_gpu:
            return self._step_gpu(q, aux, geom, dt, out, edge_out, rows, cfl_out)
        npatch, meqn = q.shape[:2]
        if rows is not None and (out is None or edge_out is None or cfl_out is None):
            raise ValueError("step(rows=...) needs out, edge_out and cfl_out")
        # without ``out`` the kernel writes the interiors and the ghosts stay unset
        q_new = np.empty_like(q) if out is None else out
        cfl = np.zeros(npatch) if cfl_out is None else cfl_out
        edge = (np.zeros((npatch, 4, meqn, max(geom.mx, geom.my))) if edge_out is None
                else edge_out)  # the kernel writes every entry: edge_out may be unset
        self._kernel(
            q,
            geom.mbc,
            aux,
            q_new,
            geom.dx,
            geom.dy,
            float(dt),
            self.params,
            self.limiter_codes,
            cfl,
            edge,
            rows,
        )
        return q_new, cfl, edge

    def _step_gpu(self, q, aux, geom, dt, out=None, edge_out=None, rows=None, cfl_out=None):
        from forestpy.cuda_device import launch_kernel, launch_stream
        from forestpy.step_params import dt_argument

        from .gpu_kernel import make_gpu_step_kernel

        xp = self.backend.xp
        npatch, meqn = q.shape[:2]
        if rows is None:
            rows = self._all_rows(npatch)
            cfl = xp.empty(npatch)  # the kernel writes every patch's entry
        elif out is None or edge_out is None or cfl_out is None:
            raise ValueError("step(rows=...) needs out, edge_out and cfl_out")
        else:
            cfl = cfl_out
        q_new = xp.empty_like(q) if out is None else out
        edge = (xp.empty((npatch, 4, meqn, max(geom.mx, geom.my))) if edge_out is None
                else edge_out)
        if not len(rows):
            return q_new, cfl, edge
        if self.gpu_kernel == "patch":
            from .gpu_patch_kernel import make_gpu_patch_kernel

            make_gpu_patch_kernel(
                self.riemann, geom.mx, geom.my, geom.mbc, order=self.order,
                transverse_waves=self.transverse_waves, capacity_index=self.capacity_index,
            )(rows, q, aux, q_new, geom.dx, geom.dy, dt, self.params_on_backend,
              self._limiter_codes_dev, cfl, edge)
            return q_new, cfl, edge
        tiles = self._tiles_per_block(len(rows), geom)
        kernel, nthreads = make_gpu_step_kernel(
            self.riemann, geom.mx, geom.my, geom.mbc, order=self.order,
            transverse_waves=self.transverse_waves, capacity_index=self.capacity_index,
            block_per_tile=tiles > 1, precision=self.precision,
        )
        args = (rows, q, aux, q_new, geom.dx, geom.dy, dt_argument(dt), self.params_on_backend,
                self._limiter_codes_dev, cfl, edge)
        if tiles > 1:
            launch_kernel(kernel, len(rows) * tiles, nthreads, launch_stream(), *args,
                          *self._tile_scratch(npatch, tiles))
        else:
            launch_kernel(kernel, len(rows), nthreads, launch_stream(), *args)
        return q_new, cfl, edge

    #: GPU step kernel blocks: ``True`` one per row tile of a patch, ``False`` (default)
    #: one per patch, ``None`` one per tile when the patches stepped would fill less
    #: than two waves of blocks (a small forest, a level of a subcycled step) and a
    #: patch has several tiles.  Off by default: the tiled kernel is a second
    #: compilation of the step (10-20 s on first use, in the middle of a run: seen in
    #: Merewether on an H200), for a gain not yet measured on whole runs.
    block_per_tile = False

    def _tiles_per_block(self, nrows: int, geom) -> int:
        """Blocks of the step launch per patch (1 or the kernel's row tiles)."""
        from .gpu_kernel import tiles_per_patch

        mode = self.block_per_tile
        if mode is False:
            return 1
        shapes = self.__dict__.setdefault("_tiles", {})
        key = (geom.mx, geom.my, geom.mbc)
        tiles = shapes.get(key)
        if tiles is None:
            tiles = shapes[key] = tiles_per_patch(self.riemann, geom.mx, geom.my,
                                                  transverse_waves=self.transverse_waves,
                                                  precision=self.precision)
        if tiles == 1 or mode:
            return tiles
        waves = self.__dict__.setdefault("_waves", {})
        wave = waves.get(key)
        if wave is None:
            wave = self.blocks_per_wave(geom)  # None until the kernel has been compiled
            if wave is None:
                return 1
            waves[key] = wave
        return tiles if nrows < 2 * wave else 1

    def _tile_scratch(self, npatch: int, tiles: int):
        """``(cfl_tiles, tickets)`` of the one-block-per-tile kernel, kept between steps
        (the tickets are zero after every launch)."""
        cache = self.__dict__.setdefault("_tile_cache", {})
        got = cache.get((npatch, tiles))
        if got is None:
            cache.clear()
            got = cache[(npatch, tiles)] = (
                self.backend.xp.empty((npatch, tiles)),
                self.backend.to_device(np.zeros(npatch, dtype=np.int32)))
        return got

    def blocks_per_wave(self, geom) -> int | None:
        """Patches the GPU step kernel for ``geom``'s patch shape runs at once (one
        block each); None on the CPU or before the kernel is compiled."""
        if not self.on_gpu:
            return None
        from forestpy.cuda_device import blocks_per_wave

        from .gpu_kernel import make_gpu_step_kernel
        from .gpu_patch_kernel import make_gpu_patch_kernel

        options = dict(order=self.order, transverse_waves=self.transverse_waves,
                       capacity_index=self.capacity_index)
        if self.gpu_kernel == "patch":
            k = make_gpu_patch_kernel(self.riemann, geom.mx, geom.my, geom.mbc, **options)
            return blocks_per_wave(k.kernel, k.nthreads)
        kernel, nthreads = make_gpu_step_kernel(self.riemann, geom.mx, geom.my, geom.mbc,
                                                precision=self.precision, **options)
        return blocks_per_wave(kernel, nthreads)

    def _all_rows(self, npatch):
        """``arange(npatch)`` on the device (cached: the kernel's patch list)."""
        cache = self.__dict__.setdefault("_rows_cache", {})
        got = cache.get(npatch)
        if got is None:
            got = cache[npatch] = self.backend.to_device(np.arange(npatch, dtype=np.int64))
        return got

    @property
    def device_dt(self) -> bool:
        """Whether :meth:`step` and :meth:`time_sync` take ``dt`` as a one-entry device
        view on the GPU (the step's parameter block, :mod:`forestpy.step_params`)."""
        return self.on_gpu

    def time_sync(self, plan, q_old, q_new, aux, edge, dt) -> None:
        """Coarse-fine conservation fix of ``q_new`` (see :mod:`forestpy.patches.time_sync`);
        on the GPU one fused launch instead of ~25 array operations."""
        if len(plan) == 0:
            return
        if self.on_gpu:
            self._time_sync_gpu.apply(plan, q_old, q_new, aux, edge, dt,
                                      self.params_on_backend, self.capacity_index)
        else:
            apply_time_sync(plan, q_old, q_new, aux, edge, None, dt, self.fluctuations,
                            self.params, self.capacity_index)

    @property
    def gpu_time_sync(self):
        """The :class:`~.gpu_kernel.GPUTimeSync` of this solver on the GPU backend (the
        subcycled time sync's pieces as one launch each), None on the CPU."""
        return self._time_sync_gpu if self.on_gpu else None

    def fluctuations(self, ixy, ql, qr, auxl, auxr, params, out):
        """``amdq + apdq`` of the normal Riemann problem at each of ``len(ql)`` interfaces."""
        self._fluct(ixy, ql, qr, auxl, auxr, params, out)
