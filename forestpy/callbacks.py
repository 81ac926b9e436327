"""Run callbacks: progress display, gauges, conserved totals, output times.

A callback is any object with some of ``on_start(sim)``, ``on_step(sim)`` and
``on_end(sim)`` (see :meth:`forestpy.Simulation.run`).  Each class here keeps its own
state; nothing is global, so two simulations never share a callback's data unless
they are given the same object.

Example (``setup`` from a demo)::

    from forestpy.callbacks import Gauges, Totals
    sim = setup(max_level=3)
    totals = Totals()
    sim.callbacks += [Gauges([(0.0, 0.0), (1.0, 0.0)], path="out/gauges.csv"), totals]
    sim.run()
    print(totals.drift())
"""

from __future__ import annotations

import contextvars
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from forestpy.io.summary import atomic_path, write_text_atomic
from forestpy.patches.point_samples import PointCells, SampleRows, gather_sample

__all__ = ["Progress", "progress_scope", "report_start", "report_step", "Gauges",
           "read_gauges", "read_gauge_units", "gauge_ids",
           "SHALLOW_WATER_SI", "Totals", "OutputTimes", "CheckpointEvery"]


def _time_eps(sim) -> float:
    """The tolerance :meth:`Simulation.run` uses to decide that ``t_final`` is reached."""
    return 1e-12 * max(1.0, abs(sim.t_final))


class Progress:
    """Progress on simulated time, written to ``stream`` (default ``sys.stderr``):
    fraction done, time, step, dt, patches and cell updates per second.

    On a terminal (``every=None`` and ``stream.isatty()``) a bar redrawn in place at
    most ten times a second; otherwise (a file, a pipe, or ``every`` given) one short
    line each time another ``every`` fraction of the simulated interval has passed
    (``every=None`` means 0.1).  The fraction is ``(sim.t - t_start) / (t_final -
    t_start)`` with ``t_start`` the time at ``on_start``.

    The rate leaves Numba compilation out: the seconds ``compile_watch`` (a
    :class:`forestpy.jit.CompileWatch`) or else ``sim.timers`` recorded.  Solvers that
    are not a Simulation (HWFV1, Boussinesq) report their steps through
    :func:`report_step`; what the display needs (``geom``, ``dt``, ``cell_updates``)
    is shown when the solver has it.
    """

    def __init__(self, stream=None, every: float | None = None, width: int = 30,
                 compile_watch=None):
        self.stream = sys.stderr if stream is None else stream
        if every is not None and not 0.0 < every <= 1.0:
            raise ValueError(f"every={every}: expected a fraction in (0, 1]")
        isatty = getattr(self.stream, "isatty", None)
        self.bar = every is None and bool(isatty and isatty())
        self.every = 0.1 if every is None else float(every)
        self.width = int(width)
        self.compile_watch = compile_watch
        self._t0 = 0.0
        self._t1 = 1.0
        self._wall0 = 0.0
        self._cells0 = 0
        self._compile0 = 0.0
        self._next = 0.0
        self._last_draw = -math.inf
        self._current = None  # the solver report_step last saw

    def fraction(self, sim) -> float:
        span = self._t1 - self._t0
        if not span > 0 or not math.isfinite(span):
            return 1.0 if span <= 0 else 0.0
        return min(1.0, max(0.0, (sim.t - self._t0) / span))

    def on_start(self, sim, t_final=None) -> None:
        self._t0 = float(sim.t)
        self._t1 = float(sim.t_final if t_final is None else t_final)
        self._wall0 = time.perf_counter()
        self._cells0 = getattr(sim, "cell_updates", 0)
        self._compile0 = self._compile_s(sim)
        self._next = self.every
        self._last_draw = -math.inf
        if self.bar:
            self._draw(sim)

    def on_step(self, sim) -> None:
        if self.bar:
            now = time.perf_counter()
            if now - self._last_draw >= 0.1:
                self._draw(sim)
            return
        frac = self.fraction(sim)
        if frac >= self._next - 1e-12:
            self._line(sim, frac)
            while self._next <= frac + 1e-12:
                self._next += self.every

    def on_end(self, sim) -> None:
        if self.bar:
            self._draw(sim)
            self.stream.write("\n")
            self.stream.flush()
        elif self._next <= 1.0 + 1e-12 and self.fraction(sim) >= 1.0 - 1e-12:
            self._line(sim, 1.0)  # the last interval was shorter than ``every``

    def tick(self, solver, t_final=None) -> None:
        """After a step of a solver that is not a Simulation (see :func:`report_step`):
        starts the display on the first step of ``solver`` (time 0 to ``t_final``, or
        ``solver.t_final``), then :meth:`on_step`."""
        t1 = getattr(solver, "t_final", None) if t_final is None else t_final
        t1 = math.inf if t1 is None else float(t1)
        if solver is not self._current:
            self.close()
            self._current = solver
            # counted from the solver's creation: its first step is already in
            self.on_start(_At(getattr(solver, "t_start", 0.0)), t1)
        elif t1 != self._t1 and math.isfinite(t1):
            self._t1 = t1  # a demo that runs on to a later time
        self.on_step(solver)

    def close(self) -> None:
        """End the display of the solver :meth:`tick` last saw (its last line)."""
        if self._current is not None:
            self.on_end(self._current)
            self._current = None

    def _compile_s(self, sim) -> float:
        if self.compile_watch is not None:
            return float(self.compile_watch.seconds)
        timers = getattr(sim, "timers", None)
        return float(getattr(timers, "compile_s", 0.0))

    def _state(self, sim) -> str:
        """Step, dt, patches and cell updates per second since ``on_start`` (Numba
        compilation left out of the rate)."""
        wall = time.perf_counter() - self._wall0
        parts = [f"step {sim.steps}"]
        dt = getattr(sim, "dt", None)
        if isinstance(dt, float):
            parts.append(f"dt={dt:.3g}")
        geom = getattr(sim, "geom", None)
        if geom is not None:
            parts.append(f"patches {int(geom.npatch)}")
        if hasattr(sim, "cell_updates"):
            busy = wall - (self._compile_s(sim) - self._compile0)
            rate = (sim.cell_updates - self._cells0) / busy if busy > 0 else 0.0
            parts.append(f"{rate:.3g} cells/s")
        parts.append(f"wall {wall:.1f} s")
        return "  ".join(parts)

    def _of(self) -> str:
        return f"/{self._t1:.4g}" if math.isfinite(self._t1) else ""

    def _draw(self, sim) -> None:
        frac = self.fraction(sim)
        n = int(round(frac * self.width))
        self.stream.write(
            f"\r[{'#' * n}{'.' * (self.width - n)}] {100 * frac:5.1f}%  "
            f"t={sim.t:.4g}{self._of()}  {self._state(sim)}\033[K"
        )
        self.stream.flush()
        self._last_draw = time.perf_counter()

    def _line(self, sim, frac: float) -> None:
        self.stream.write(f"{100 * frac:3.0f}%  t={sim.t:.4g}{self._of()}  "
                          f"{self._state(sim)}\n")
        self.stream.flush()


class _At:
    """The start of a solver's run as :meth:`Progress.on_start` reads it."""

    def __init__(self, t):
        self.t, self.t_final, self.steps, self.cell_updates = float(t), None, 0, 0


_OBSERVERS: contextvars.ContextVar = contextvars.ContextVar("forestpy_observers", default=())


@contextmanager
def progress_scope(*observers):
    """``with progress_scope(Progress(...), GridOutput(...)):`` -- solvers that are not a
    Simulation report their steps to these observers (:func:`report_step`,
    :func:`report_start`) within the block; each observer's ``close()`` runs at its end
    (the progress display's last line, the last frame).  ``forestpy run`` wraps a
    demo's ``main`` in one."""
    token = _OBSERVERS.set(tuple(observers))
    try:
        yield observers[0] if len(observers) == 1 else observers
    finally:
        _OBSERVERS.reset(token)
        for obs in observers:
            obs.close()


def report_start(solver, t_final=None) -> None:
    """Called by a solver that is not a Simulation when a run starts (before its first
    step): observers that care (frames) see the initial state."""
    for obs in _OBSERVERS.get():
        start = getattr(obs, "start", None)
        if start is not None:
            start(solver, t_final)


def report_step(solver, t_final=None) -> None:
    """Called by a solver that is not a Simulation after each step: shows progress (and
    writes frames) when a :func:`progress_scope` is open, else does nothing.  ``solver``
    has ``t`` and ``steps`` (and optionally ``dt``, ``cell_updates``, ``t_final``,
    ``frame_fields()``); ``t_final`` is where the current run ends, when the solver does
    not hold it."""
    for obs in _OBSERVERS.get():
        obs.tick(solver, t_final)


class Gauges:
    """Time series of the state at fixed points, from the finest leaf containing each.

    Parameters
    ----------
    points : sequence of (x, y), or mapping ``gauge_id -> (x, y)``
        Gauge positions; with a sequence the ids are ``0, 1, ...``.
    fields : sequence of str or int, optional
        Fields to record: names from ``sim.riemann.field_names`` or indices, and
        derived fields the solver declares (``sim.riemann.derived_fields``: for shallow
        water depth, velocity_x, velocity_y, speed, surface), evaluated on the sampled
        cell; all of ``field_names`` by default.
    path : str or path, optional
        File written at ``on_end`` (atomically).  CSV: columns ``t, gauge, x, y`` and
        one per field, named by the header line; read it back with :func:`read_gauges`.
        A path ending in ``.nc`` is written as NetCDF through ``xarray`` (installed
        separately) with dimensions ``(time, gauge)``; see :meth:`write_netcdf`.
        A path ending in ``.npz`` is a compressed archive (:meth:`write_archive`: the
        samples through the ``lossless`` codec of :mod:`forestpy.io.codecs`, read back
        bit for bit).
    codec : str, optional
        The codec of a ``.npz`` archive: ``lossless`` (default; ``lossless:level=9``)
        or ``none``.  Lossy codecs are refused: gauge series are read back exactly.

    units : mapping of str to str, optional
        Units of the fields and of ``t``, ``x``, ``y`` (UDUNITS strings, e.g.
        :data:`SHALLOW_WATER_SI`); written as the ``units`` attributes of the NetCDF file
        and into ``gauges.vtp``.
    crs : str, optional
        The coordinate system of ``x, y`` in words (e.g. ``"local metres from the tank's
        corner"`` or ``"UTM zone 56S (EPSG:32756)"``), written beside the units.

    The state is sampled at ``on_start`` and after every accepted step (after every
    coarse step when the levels subcycle), in the cell ``sim.sample`` reads: the
    samples stay on the simulation's device until they are needed on the host (at
    ``on_end``, checkpoints, :attr:`times`, :meth:`data`, the writers; see
    :meth:`flush`).  :meth:`data` returns the samples in the same form as
    :func:`read_gauges`.
    """

    timer_phase = "output"
    deferrable = True  # on_step: device work on the stream, reading the interior

    def __init__(self, points, fields: Sequence | None = None, path=None,
                 units: Mapping[str, str] | None = None, crs: str | None = None,
                 codec: str = "lossless"):
        self.codec = _check_gauge_codec(codec)
        ids, xy = gauge_ids(points)
        xy = np.asarray(xy, dtype=np.float64)
        if xy.ndim != 2 or xy.shape[1] != 2 or len(xy) == 0:
            raise ValueError(f"points: expected a non-empty list of (x, y), got shape {xy.shape}")
        self.ids = ids
        self.x = xy[:, 0].copy()
        self.y = xy[:, 1].copy()
        self.requested_fields = None if fields is None else list(fields)
        self.path = path
        self.units = {str(k): str(v) for k, v in (units or {}).items()}
        self.crs = None if crs is None else str(crs)
        self.field_names: list[str] = []
        self._index: list[int] = []
        self._derived: dict = {}
        self._times: list[float] = []
        self._host_values: list[np.ndarray] = []  # one (ngauges, nfields) array per sample
        # samples not yet on the host: their times, and their raw values on the device
        # (rows of SampleRows; see record)
        self._pending_times: list[float] = []
        self._rows = None
        self._cells = PointCells(self.x, self.y)
        self._exchange = None
        self._layout = (0, 0)  # components of q and aux in a pending row, per gauge
        # (first pending row, owner of each gauge) per location of the gauges, for the
        # assembly of a distributed run's samples
        self._owners: list[tuple[int, np.ndarray]] = []

    @property
    def times(self) -> list[float]:
        """The sample times (copies pending samples to the host first: see
        :meth:`flush`)."""
        self.flush()
        return self._times

    @times.setter
    def times(self, value) -> None:
        self._drop_pending()
        self._times = list(value)

    @property
    def _values(self) -> list[np.ndarray]:
        self.flush()
        return self._host_values

    @_values.setter
    def _values(self, value) -> None:
        self._drop_pending()
        self._host_values = list(value)

    def _resolve_fields(self, sim) -> None:
        names = list(sim.riemann.field_names)
        derived = dict(sim.riemann.derived_fields)
        self._derived = {}
        self._params = np.asarray(sim.params)
        if self.requested_fields is None:
            self._index = list(range(len(names)))
            self.field_names = list(names)
        else:
            index, chosen = [], []
            for f in self.requested_fields:
                if isinstance(f, str):
                    if f in derived:
                        self._derived[f] = derived[f]
                        index.append(-1)
                    elif f in names:
                        index.append(names.index(f))
                    else:
                        raise ValueError(
                            f"unknown gauge field {f!r}; valid: {names + sorted(derived)}"
                        )
                    chosen.append(f)
                elif 0 <= int(f) < len(names):
                    index.append(int(f))
                    chosen.append(names[int(f)])
                else:
                    raise ValueError(f"gauge field index {f} out of range for {names}")
            self._index = index
            self.field_names = chosen
        bad = {"t", "gauge", "x", "y"} & set(self.field_names)
        if bad:
            raise ValueError(f"field name(s) {sorted(bad)} clash with the gauge CSV columns")

    def record(self, sim) -> None:
        """Sample every gauge now (called by the hooks).

        The raw state of the gauges' cells (the recorded components, and with derived
        fields every component and aux field) is gathered on the backend into a row
        of a device buffer: no host transfer, and no search of the forest unless it
        changed since the last sample.  The host gets the rows, and the derived fields
        are computed, at :meth:`flush`.  Collective in a distributed run (every rank
        records a row; the owners' values are assembled at the flush)."""
        cells = self._cells
        relocated = cells.update(sim)  # first: it may localize sim.q (a distributed build)
        q = sim.q
        aux = sim.aux if self._derived else None
        qcomp = range(q.shape[1]) if self._derived else self._index
        layout = (len(qcomp), 0 if aux is None else aux.shape[1])
        width = len(cells.x) * sum(layout)
        rows = self._rows
        if rows is not None and (rows.backend is not sim.backend or rows.width != width
                                 or rows.dtype != q.dtype or rows.full):
            self.flush()
            rows = None
        if rows is None:
            rows = self._rows = SampleRows(sim.backend, width, q.dtype)
            self._exchange, self._layout = sim.exchange, layout
        if relocated or not self._owners:
            self._owners.append((len(self._pending_times), cells.owner))
        if q.size and sim.backend.is_gpu:  # one launch gathers the whole row
            gather_sample(q, aux, cells.entries(qcomp, range(layout[1])), rows,
                          sim.backend)
            self._pending_times.append(float(sim.t))
            return
        row = rows.next_row()
        if q.size:  # a rank holding no patch holds no gauge: its row is not read
            xp, nq = sim.backend.xp, len(cells.x) * layout[0]
            xp.take(q.reshape(-1), cells.flat_index(q.shape, qcomp).reshape(-1), out=row[:nq])
            if aux is not None:
                xp.take(aux.reshape(-1), cells.flat_index(aux.shape, range(layout[1]))
                        .reshape(-1), out=row[nq:])
        self._pending_times.append(float(sim.t))

    def flush(self) -> None:
        """Copy the pending samples to the host (one transfer) and compute their
        derived fields.  Done at output (:meth:`on_end`, :meth:`state_dict`, the
        writers, :attr:`times`) and when the device buffer is full.  Collective in a
        distributed run while samples are pending (every rank has the same number)."""
        if not self._pending_times:
            return
        n, ng = len(self._pending_times), len(self.x)
        blocks = np.split(self._rows.take().astype(np.float64), [ng * self._layout[0]], axis=1)
        q, aux = (b.reshape(n, ng, -1) for b in blocks)
        ex = self._exchange
        if ex is not None and ex.distributed:
            # every rank recorded every gauge; the values of a gauge are its owner's
            owner = np.empty((n, ng), dtype=np.int64)
            ends = [start for start, _ in self._owners[1:]] + [n]
            for (start, own), end in zip(self._owners, ends):
                owner[start:end] = own
            pick = (owner, np.arange(n)[:, None], np.arange(ng)[None, :])
            q, aux = (np.stack(ex.allgather(a))[pick] for a in (q, aux))
        vals = np.empty((n, ng, len(self._index)))
        for k, (m, name) in enumerate(zip(self._index, self.field_names)):
            if m < 0:
                # derived fields take (npatch, num_eqn, ny, nx): the samples as one patch
                vals[:, :, k] = np.asarray(self._derived[name](
                    np.moveaxis(q, 2, 0)[None], np.moveaxis(aux, 2, 0)[None],
                    self._params))[0]
            else:
                vals[:, :, k] = q[:, :, m if self._derived else k]
        self._times.extend(self._pending_times)
        self._host_values.extend(vals)
        self._pending_times = []
        self._owners = [(0, self._owners[-1][1])]

    def _drop_pending(self) -> None:
        self._pending_times = []
        self._rows = None
        self._owners = []

    def _last_time(self):
        if self._pending_times:
            return self._pending_times[-1]
        return self._times[-1] if self._times else None

    def on_start(self, sim) -> None:
        self.flush()  # pending samples are read with the fields they were taken for
        self._resolve_fields(sim)
        if self._last_time() != sim.t:
            self.record(sim)

    def on_step(self, sim) -> None:
        self.record(sim)

    def on_end(self, sim) -> None:
        self.flush()
        if self.path is None:
            return
        if str(self.path).endswith(".nc"):
            self.write_netcdf(self.path)
        elif str(self.path).endswith(".npz"):
            self.write_archive(self.path)
        else:
            self.write(self.path)
        try:
            self.write_vtp(Path(self.path).with_suffix(".vtp"))
        except ImportError:  # vtk is optional
            pass

    def write_vtp(self, path) -> Path:
        """The gauges as points for ParaView (``.vtp``): per field its last sampled
        value (``<field>``) and its maximum over the run (``max_<field>``), and the gauge
        ids as ``label``.  The time series themselves are in the CSV, which ParaView
        also opens."""
        from forestpy.io.vtk import write_points

        vals = np.array(self._values, dtype=np.float64).reshape(
            len(self.times), len(self.ids), len(self.field_names))
        data = {}
        for k, name in enumerate(self.field_names):
            series = vals[:, :, k]
            empty = len(self.times) == 0
            data[name] = np.full(len(self.ids), np.nan) if empty else series[-1]
            data[f"max_{name}"] = (np.full(len(self.ids), np.nan) if empty
                                   else np.fmax.reduce(series, axis=0))
        meta = {}
        if self.units:
            meta["units"] = ", ".join(f"{k}={v}" for k, v in self.units.items())
        if self.crs:
            meta["crs"] = self.crs
        return write_points(path, self.x, self.y, data, labels=self.ids, meta=meta)

    def write_netcdf(self, path) -> None:
        """Write the samples as NetCDF through ``xarray`` following the CF conventions'
        time-series layout (``featureType = "timeSeries"``): one variable per field with
        dimensions ``(time, gauge)``, the coordinates ``time``, ``gauge`` (the ids,
        ``cf_role = "timeseries_id"``), ``x`` and ``y``; ``units`` and ``long_name``
        attributes where known (``units``, ``crs``).  Written to a temporary name and
        renamed; :func:`read_gauges` reads it back."""
        try:
            import xarray as xr
        except ImportError as exc:
            raise RuntimeError("NetCDF gauge output needs xarray: pip install xarray") from exc

        vals = np.array(self._values, dtype=np.float64).reshape(
            len(self.times), len(self.ids), len(self.field_names)
        )

        def attrs(name, **extra):
            a = dict(extra)
            if name in LONG_NAMES:
                a.setdefault("long_name", LONG_NAMES[name])
            if name in self.units:
                a["units"] = self.units[name]
            return a

        xy = {"coordinate_system": self.crs} if self.crs else {}
        ds = xr.Dataset(
            {name: (("time", "gauge"), vals[:, :, k], attrs(name, coordinates="x y"))
             for k, name in enumerate(self.field_names)},
            coords={
                "time": ("time", np.array(self.times, dtype=np.float64),
                         attrs("t", standard_name="time", long_name="simulation time",
                               axis="T")),
                "gauge": ("gauge", [str(g) for g in self.ids],
                          {"cf_role": "timeseries_id", "long_name": "gauge id"}),
                "x": ("gauge", self.x.copy(), attrs("x", long_name="gauge x coordinate", **xy)),
                "y": ("gauge", self.y.copy(), attrs("y", long_name="gauge y coordinate", **xy)),
            },
            attrs={"Conventions": "CF-1.8", "featureType": "timeSeries",
                   "title": "forestpy gauge time series", "source": "forestpy Gauges",
                   **({"coordinate_system": self.crs} if self.crs else {})},
        )
        with atomic_path(path) as tmp:
            ds.to_netcdf(tmp)

    def state_dict(self) -> dict:
        """The recorded samples (for checkpoints); arrays are kept bitwise."""
        n, ng = len(self.times), len(self.ids)
        if n:
            values = np.stack(self._values).astype(np.float64)
        else:
            values = np.zeros((0, ng, len(self.field_names)))
        return {
            "ids": [str(g) for g in self.ids],
            "x": self.x.copy(),
            "y": self.y.copy(),
            "field_names": list(self.field_names),
            "times": np.array(self.times, dtype=np.float64),
            "values": values,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore the samples of :meth:`state_dict`; the gauges must be the same."""
        ids = [str(g) for g in self.ids]
        if list(state["ids"]) != ids or not (
            np.array_equal(state["x"], self.x) and np.array_equal(state["y"], self.y)
        ):
            raise ValueError(
                f"gauges differ: checkpoint ids {list(state['ids'])} at x={state['x']}, "
                f"y={state['y']}; here ids {ids} at x={self.x}, y={self.y}"
            )
        values = np.asarray(state["values"], dtype=np.float64)
        times = np.asarray(state["times"], dtype=np.float64)
        if values.shape[:2] != (len(times), len(ids)):
            raise ValueError(f"gauge values of shape {values.shape} for {len(times)} times")
        self.field_names = list(state["field_names"])
        self.times = [float(t) for t in times]
        self._values = [values[k].copy() for k in range(len(times))]

    def rows(self):
        """Yield the rows ``(t, gauge_id, x, y, value, ...)`` in time order."""
        for t, vals in zip(self.times, self._values):
            for g, gid in enumerate(self.ids):
                yield (t, gid, float(self.x[g]), float(self.y[g]), *vals[g].tolist())

    def write(self, path) -> None:
        """Write the CSV (header line, then one row per sample and gauge)."""
        header = ",".join(["t", "gauge", "x", "y", *self.field_names])
        lines = [header]
        for row in self.rows():
            t, gid, x, y, *vals = row
            lines.append(",".join([repr(t), str(gid), repr(x), repr(y), *map(repr, vals)]))
        write_text_atomic(path, "\n".join(lines) + "\n")

    def write_archive(self, path, codec: str | None = None) -> Path:
        """Write the samples as a compressed archive (``.npz``, written atomically):
        the values ``(time, gauge, field)`` stored as one batch ``[1, field, gauge,
        time]`` (each gauge's series contiguous, which byte shuffle + zstd compress
        best) through ``codec`` (default the one given to the constructor:
        ``lossless``), the times, ``x``, ``y`` as float64, and a JSON header with the
        ids, field names, units and CRS.  :func:`read_gauges` reads it back bit for
        bit."""
        import json

        from forestpy.io.codecs import encode

        codec = self.codec if codec is None else _check_gauge_codec(codec)
        n, ng = len(self.times), len(self.ids)
        vals = np.array(self._values, dtype=np.float64).reshape(n, ng, len(self.field_names))
        batch = np.ascontiguousarray(vals.transpose(2, 1, 0)[None])
        meta = {"format": GAUGE_ARCHIVE, "version": 1, "ids": [str(g) for g in self.ids],
                "int_ids": [isinstance(g, int | np.integer) for g in self.ids],
                "field_names": list(self.field_names), "units": self.units,
                "crs": self.crs, "codec": codec}
        members = {"header": np.frombuffer(json.dumps(meta).encode(), np.uint8),
                   "times": np.array(self.times, dtype=np.float64),
                   "x": self.x.astype(np.float64), "y": self.y.astype(np.float64)}
        if batch.size:
            members["values"] = np.frombuffer(encode(batch, codec), np.uint8)
        path = Path(path)
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            np.savez(f, **members)
        return path

    def data(self) -> dict:
        """The samples as ``{gauge_id: {"t", "x", "y", field...: array}}``."""
        out = {}
        vals = np.array(self._values).reshape(len(self.times), len(self.ids), -1)
        t = np.array(self.times, dtype=np.float64)
        for g, gid in enumerate(self.ids):
            d = {"t": t.copy(), "x": np.full(len(t), self.x[g]), "y": np.full(len(t), self.y[g])}
            for k, name in enumerate(self.field_names):
                d[name] = vals[:, g, k].copy()
            out[gid] = d
        return out


#: the ``format`` of a gauge archive's header (:meth:`Gauges.write_archive`)
GAUGE_ARCHIVE = "forestpy-gauges"


def gauge_ids(points) -> tuple[list, list]:
    """``(ids, points)`` of gauges given as a mapping ``{id: (x, y)}`` or a sequence of
    points (ids 0, 1, ...); ids that would break the CSV (commas, quotes, newlines) or
    repeat are a ``ValueError``."""
    if isinstance(points, Mapping):
        ids, xy = list(points.keys()), list(points.values())
    else:
        xy = list(points)
        ids = list(range(len(xy)))
    for gid in ids:
        if any(c in str(gid) for c in ',\n\r"'):
            raise ValueError(f"gauge id {gid!r} may not contain commas, quotes or newlines")
    if len(set(map(str, ids))) != len(ids):
        raise ValueError(f"gauge ids must be distinct, got {ids}")
    return ids, xy


def _check_gauge_codec(codec) -> str:
    from forestpy.io.codecs import CodecError, get_codec, parse_spec

    try:
        name, _ = parse_spec(codec)
        if name not in ("lossless", "none"):
            raise CodecError(f"{name!r} is lossy or not for series; use lossless or none")
        get_codec(codec)
    except CodecError as e:
        raise ValueError(f"gauge archive codec {codec!r}: {e}") from None
    return str(codec).strip()


def _read_gauges_archive(path) -> dict:
    import json
    import zipfile

    from forestpy.errors import InputFileError
    from forestpy.io.codecs import CodecError, decode

    def bad(problem):
        return InputFileError(f"{path}: not a readable gauge archive ({problem})")

    try:
        with np.load(path, allow_pickle=False) as z:
            members = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as e:
        raise bad(e) from None
    missing = {"header", "times", "x", "y"} - set(members)
    if missing:
        raise bad(f"missing {sorted(missing)}")
    try:
        meta = json.loads(members["header"].tobytes().decode())
        ids, names = list(meta["ids"]), [str(n) for n in meta["field_names"]]
        int_ids = list(meta.get("int_ids") or [False] * len(ids))
        ok = meta.get("format") == GAUGE_ARCHIVE and len(int_ids) == len(ids)
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise bad(f"header: {e}") from None
    if not ok:
        raise bad("header of another format")
    t, x, y = (np.asarray(members[k]) for k in ("times", "x", "y"))
    if not (t.dtype == x.dtype == y.dtype == np.float64 and t.ndim == x.ndim == y.ndim == 1
            and x.size == y.size == len(ids)):
        raise bad("times, x, y are not float64 vectors of the right lengths")
    shape = (1, len(names), len(ids), t.size)
    if "values" in members:
        try:
            batch = decode(members["values"].tobytes(), name=str(path))
        except CodecError as e:
            raise InputFileError(str(e)) from None
        if batch.shape != shape or batch.dtype != np.float64:
            raise bad(f"values of shape {batch.shape}, {shape} expected")
    elif math.prod(shape):
        raise bad("no values")
    else:
        batch = np.zeros(shape)
    out = {}
    for g, gid in enumerate(ids):
        d = {"t": t.copy(), "x": np.full(t.size, x[g]), "y": np.full(t.size, y[g])}
        for k, name in enumerate(names):
            d[name] = batch[0, k, g].copy()
        out[_parse_id(gid) if int_ids[g] else str(gid)] = d
    return out


def _parse_id(text: str):
    try:
        return int(text)
    except ValueError:
        return text


#: Units of the shallow-water fields, their derived fields and t, x, y in SI (UDUNITS).
SHALLOW_WATER_SI = {
    "t": "s", "x": "m", "y": "m", "h": "m", "hu": "m2 s-1", "hv": "m2 s-1", "depth": "m",
    "surface": "m", "velocity_x": "m s-1", "velocity_y": "m s-1", "speed": "m s-1",
}
#: ``long_name`` attributes of the NetCDF gauge variables.
LONG_NAMES = {
    "t": "simulation time", "h": "water depth", "hu": "x momentum (depth times velocity)",
    "hv": "y momentum (depth times velocity)", "depth": "water depth",
    "surface": "water surface elevation", "velocity_x": "x velocity",
    "velocity_y": "y velocity", "speed": "flow speed",
}


def _read_gauges_netcdf(path) -> dict:
    try:
        import xarray as xr
    except ImportError as exc:
        raise RuntimeError("reading NetCDF gauges needs xarray: pip install xarray") from exc
    from forestpy.errors import InputFileError

    with xr.open_dataset(path) as ds:
        if "gauge" not in ds.dims or "time" not in ds.dims:
            raise InputFileError(f"{path}: not a gauge file (no time and gauge dimensions)")
        t = np.asarray(ds["time"].values, dtype=np.float64)
        names = [n for n in ds.data_vars if ds[n].dims == ("time", "gauge")]
        out = {}
        for g, gid in enumerate(ds["gauge"].values):
            gid = gid.decode() if isinstance(gid, bytes) else str(gid)
            d = {"t": t.copy(), "x": np.full(len(t), float(ds["x"].values[g])),
                 "y": np.full(len(t), float(ds["y"].values[g]))}
            for name in names:
                d[name] = np.asarray(ds[name].values[:, g], dtype=np.float64)
            out[_parse_id(gid)] = d
    return out


def read_gauge_units(path) -> dict:
    """``{name: unit}`` that a gauge file states: the ``units`` attributes of a NetCDF
    file, or for a CSV the ``units`` of the ``.vtp`` beside it (:meth:`Gauges.write_vtp`);
    ``{}`` when none."""
    path = Path(path)
    if path.suffix == ".nc":
        try:
            import xarray as xr
        except ImportError:
            return {}
        with xr.open_dataset(path) as ds:
            units = {str(n): str(ds[n].attrs["units"]) for n in ds.variables
                     if "units" in ds[n].attrs}
        if "time" in units:
            units["t"] = units["time"]
        return units
    vtp = path.with_suffix(".vtp")
    if not vtp.is_file():
        return {}
    try:
        from vtkmodules.vtkIOXML import vtkXMLPolyDataReader
    except ImportError:
        return {}
    reader = vtkXMLPolyDataReader()
    reader.SetFileName(str(vtp))
    reader.Update()
    arr = reader.GetOutput().GetFieldData().GetAbstractArray("units")
    if arr is None or not arr.GetNumberOfValues():
        return {}
    return dict(item.split("=", 1) for item in arr.GetValue(0).split(", ") if "=" in item)


def read_gauges(path) -> dict:
    """Read a gauge file written by :class:`Gauges`: CSV, NetCDF (a ``.nc`` file) or a
    compressed archive (``.npz``, :meth:`Gauges.write_archive`).

    Returns ``{gauge_id: {"t": array, "x": array, "y": array, field: array, ...}}``
    with rows in file (time) order; ids that look like integers become ``int``.
    Lines of a CSV starting with ``#`` are skipped.  A file that is not such a table
    raises :class:`~forestpy.errors.InputFileError` naming the file and the line.
    """
    from forestpy.errors import InputFileError

    try:
        with open(path, "rb") as f:
            magic = f.read(4)
        if str(path).endswith(".nc") or magic[:3] == b"CDF" or magic == b"\x89HDF":
            return _read_gauges_netcdf(path)
        if str(path).endswith(".npz") or magic == b"PK\x03\x04":
            return _read_gauges_archive(path)
        with open(path, encoding="utf-8") as f:
            lines = [(k, ln.strip()) for k, ln in enumerate(f, start=1)
                     if ln.strip() and not ln.startswith("#")]
    except (OSError, UnicodeDecodeError) as e:
        raise InputFileError(f"{path}: cannot be read as a gauge file ({e})") from None
    if not lines:
        raise InputFileError(f"{path}: empty gauge file (no header line)")
    header = lines[0][1].split(",")
    if header[:4] != ["t", "gauge", "x", "y"]:
        raise InputFileError(f"{path}: not a gauge file, header starts {header[:4]}"[:300])
    columns: dict = {}
    for lineno, ln in lines[1:]:
        parts = ln.split(",")
        if len(parts) != len(header):
            raise InputFileError(
                f"{path}: line {lineno} has {len(parts)} columns, header has {len(header)}"
            )
        try:
            row = [float(parts[0]), float(parts[2]), float(parts[3]), *map(float, parts[4:])]
        except ValueError:
            raise InputFileError(f"{path}: line {lineno}: not numbers: {ln[:80]!r}") from None
        columns.setdefault(_parse_id(parts[1]), []).append(row)
    names = ["t", "x", "y", *header[4:]]
    out = {}
    for gid, rows in columns.items():
        a = np.array(rows, dtype=np.float64).reshape(len(rows), len(names))
        out[gid] = {name: a[:, k].copy() for k, name in enumerate(names)}
    return out


class Totals:
    """History of ``sim.totals()`` (integrals of the conserved fields) for conservation
    checks: one entry at ``on_start`` and one after every accepted step, so a single
    run gives ``steps + 1`` entries."""

    def __init__(self):
        self.times: list[float] = []
        self.history: list[dict] = []

    def record(self, sim) -> None:
        self.times.append(float(sim.t))
        self.history.append(dict(sim.totals()))

    def on_start(self, sim) -> None:
        if not self.times or self.times[-1] != sim.t:
            self.record(sim)

    def on_step(self, sim) -> None:
        self.record(sim)

    def __len__(self) -> int:
        return len(self.history)

    def state_dict(self) -> dict:
        """The history (for checkpoints)."""
        return {"times": np.array(self.times, dtype=np.float64),
                "history": [dict(h) for h in self.history]}

    def load_state_dict(self, state: dict) -> None:
        times = [float(t) for t in np.asarray(state["times"], dtype=np.float64)]
        history = [{str(k): float(v) for k, v in h.items()} for h in state["history"]]
        if len(times) != len(history):
            raise ValueError(f"{len(times)} times but {len(history)} totals")
        self.times, self.history = times, history

    def arrays(self) -> dict:
        """``{"t": array, field: array, ...}`` over the history."""
        out = {"t": np.array(self.times, dtype=np.float64)}
        for name in self.history[0] if self.history else ():
            out[name] = np.array([h[name] for h in self.history], dtype=np.float64)
        return out

    def drift(self) -> dict:
        """Largest ``|total(t) - total(t0)|`` per field, relative to ``|total(t0)|``
        (absolute when the initial total is 0)."""
        out = {}
        for name, a in self.arrays().items():
            if name == "t":
                continue
            scale = abs(a[0]) if a[0] != 0 else 1.0
            out[name] = float(np.abs(a - a[0]).max() / scale)
        return out


class OutputTimes:
    """Call ``fn(sim)`` when the simulation reaches each output time.

    ``times`` is either a sequence of times or a positive number: an interval, giving
    the times ``t_start, t_start + interval, ...`` up to ``t_final`` (both included).

    The Simulation shortens the step before each output time so that it lands on it
    (:meth:`next_time`, Clawpack's behaviour): ``fn`` sees the state at the output
    time.  Should a step still pass several output times (``run`` driven by hand),
    ``fn`` is called once, on the first accepted step at or after them.  Times at or
    before the start time fire in ``on_start``.  ``fired`` lists
    ``(output_time, sim.t, sim.steps)`` for every output time reached.
    """

    def __init__(self, times, fn: Callable):
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}")
        self.fn = fn
        if isinstance(times, (int, float, np.integer, np.floating)):
            if not times > 0:
                raise ValueError(f"output interval must be positive, got {times}")
            self.interval: float | None = float(times)
            self.times: list[float] = []
        else:
            self.interval = None
            self.times = sorted(float(t) for t in times)
        self.fired: list[tuple[float, float, int]] = []
        self.calls = 0
        self._next = 0
        self._restored = False

    def state_dict(self) -> dict:
        """Output times, progress through them and the record of fired times (for
        checkpoints; ``fn`` is not stored)."""
        return {
            "interval": self.interval,
            "times": list(self.times),
            "next": self._next,
            "fired": [list(f) for f in self.fired],
            "calls": self.calls,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`: the next ``on_start`` keeps these output times
        instead of computing new ones from the restart time."""
        interval = state["interval"]
        if (interval is None) != (self.interval is None) or (
            interval is not None and float(interval) != self.interval
        ):
            raise ValueError(f"output interval {interval} in the checkpoint, {self.interval} here")
        self.times = [float(t) for t in state["times"]]
        self._next = int(state["next"])
        self.fired = [(float(a), float(b), int(c)) for a, b, c in state["fired"]]
        self.calls = int(state["calls"])
        self._restored = True

    def on_start(self, sim) -> None:
        if self.interval is not None and not self._restored:
            t0, t1 = float(sim.t), float(sim.t_final)
            n = int(math.floor((t1 - t0) / self.interval + 1e-9))
            self.times = [t0 + k * self.interval for k in range(n + 1)]
            if t1 - self.times[-1] > _time_eps(sim):
                self.times.append(t1)
            self._next = 0
            self.fired = []
        self._restored = False
        self._check(sim)

    def on_step(self, sim) -> None:
        self._check(sim)

    def _check(self, sim) -> None:
        eps = _time_eps(sim)
        due = []
        while self._next < len(self.times) and self.times[self._next] <= sim.t + eps:
            due.append(self.times[self._next])
            self._next += 1
        if due:
            self.fired.extend((t, float(sim.t), int(sim.steps)) for t in due)
            self.calls += 1
            self.fn(sim)

    @property
    def pending(self) -> list[float]:
        """Output times not reached yet."""
        return self.times[self._next :]

    def next_time(self, sim) -> float | None:
        """The next output time (the Simulation's steps land on it), or None."""
        return self.times[self._next] if self._next < len(self.times) else None


class CheckpointEvery:
    """Write a checkpoint (:mod:`forestpy.io.checkpoint`) every ``every_steps`` steps.

    Files are ``out_dir/checkpoint_<step>.npz`` (step zero-padded to 6 digits), each
    written atomically, plus ``out_dir/checkpoint_latest.npz`` (a hard link, or a copy,
    renamed into place).  Only the last ``keep`` numbered files written by this object
    are kept.  The step count is the Simulation's (``sim.steps``), so a restarted run
    keeps the cadence.  With ``at_end`` a checkpoint is also written at ``on_end``
    when the last step was not one already.

    Put it LAST in ``sim.callbacks``: the checkpoint then holds the state of the other
    callbacks after the step (e.g. the gauge sample of that step).  ``meta`` (JSON-able)
    is stored in every file.  ``codec`` (a :mod:`forestpy.io.codecs` specification, e.g.
    ``"lossless"`` or ``"dwt53:rtol=1e-6"``) compresses the patch data of every file.
    ``written`` lists the paths written, in order.
    """

    timer_phase = "output"
    collective = True  # every rank calls it: save_checkpoint is collective

    def __init__(self, out_dir, every_steps: int, keep: int = 2, at_end: bool = True,
                 meta: dict | None = None, codec=None):
        every_steps = int(every_steps)
        if every_steps < 1:
            raise ValueError(f"every_steps must be >= 1, got {every_steps}")
        if int(keep) < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.out_dir = Path(out_dir)
        self.every_steps = every_steps
        self.keep = int(keep)
        self.at_end = bool(at_end)
        self.meta = meta
        self.codec = codec
        self.written: list = []
        self._last_step: int | None = None

    def path_for(self, steps: int):
        return self.out_dir / f"checkpoint_{steps:06d}.npz"

    def on_step(self, sim) -> None:
        if sim.steps % self.every_steps == 0:
            self.write(sim)

    def on_end(self, sim) -> None:
        if self.at_end and self._last_step != sim.steps:
            self.write(sim)

    def write(self, sim):
        """Write the checkpoint of the current step now; return its path.  Collective
        (:meth:`forestpy.Simulation.save_checkpoint`: in a distributed run the other
        callbacks' device samples are flushed on every rank, each rank writes its own
        patches and rank 0 the index and ``checkpoint_latest.npz``, a link to it)."""
        from forestpy.io.checkpoint import remove_checkpoint

        path = sim.save_checkpoint(self.path_for(sim.steps), meta=self.meta, codec=self.codec)
        writer = sim.exchange.rank == 0
        if writer:
            latest = self.out_dir / "checkpoint_latest.npz"
            tmp = self.out_dir / f".checkpoint_latest.{os.getpid()}.tmp"
            try:
                tmp.unlink(missing_ok=True)
                try:
                    os.link(path, tmp)
                except OSError:
                    shutil.copyfile(path, tmp)
                os.replace(tmp, latest)
            finally:
                tmp.unlink(missing_ok=True)
        if path in self.written:
            self.written.remove(path)
        self.written.append(path)
        self._last_step = sim.steps
        while len(self.written) > self.keep:
            old = self.written.pop(0)
            if writer:  # a per-rank checkpoint: its rank files too
                remove_checkpoint(old)
        return path
