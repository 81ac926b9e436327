"""GeoClaw-like runs from a configuration file: the role of GeoClaw's ``setrun.py``.

``forestpy run --config run.toml`` reads a TOML file (``tomllib``, standard library
from Python 3.11; ``tomli`` on 3.10)
and builds the run from it: domain, refinement, topography and dtopo files, boundary
conditions (walls, extrapolation, an incident wave from a time series), gauges, an
fgmax grid, refinement regions and output times.  File names are relative to the
configuration file.  Every table and key is checked: an unknown one, a missing file or
a value of the wrong type is one error message naming it (``ConfigError``; exit code 2
on the command line), before anything is computed.  ``docs/tutorial.md`` walks
through one; ``demos/geoclaw/okushiri.toml`` reproduces ``demos/geoclaw/okushiri.py``.

Tables (``[name]``; ``[[name]]`` for lists):

``[run]``
    ``name``, ``t_final`` (s), ``cfl`` (0.9), ``kind = "geoclaw"``.
``[domain]``
    ``lower = [x, y]``, ``upper = [x, y]`` (m), ``ntrees = [nx, ny]`` (square trees).
``[refinement]``
    ``mx`` (16), ``min_level`` (0), ``max_level`` (2), ``regrid_interval`` (4),
    ``wave_tolerance`` (0.1 m: refine where the surface departs from the sea level by
    more), ``speed_tolerance``, ``depth_tolerance``, ``shoreline``.
``[physics]``
    ``grav`` (9.81), ``sea_level`` (0), ``dry_tolerance`` (1e-3 m), ``manning`` (0.025),
    ``speed_limit`` (50 m/s), ``riemann_solver`` ("geoclaw"), ``limiter`` ("mc").
``[[topography]]``
    ``file`` (ESRI ASCII ``.asc``, GeoTIFF ``.tif``, GeoClaw ``.tt1/.tt2/.tt3``;
    ``topotype`` to force one) or ``constant`` (a flat bed over the domain);
    ``registration`` ("node"/"cell": overrides the file's), ``lower = [x, y]``
    (overrides the file's origin).  Later entries take precedence where they overlap
    (GeoClaw: the finer one).
``[[dtopo]]``
    ``file`` (GeoClaw dtopo, ``dtopotype`` 1 or 3): the bed moves by its dz(t).
``[boundary]``
    ``x_lower``, ``x_upper``, ``y_lower``, ``y_upper``: ``"wall"`` (default),
    ``"extrap"``, or ``{incident_wave = "file", skip_rows = 1}`` (columns t, eta).
``[[regions]]``
    ``x = [x1, x2]``, ``y = [y1, y2]``, ``min_level``, ``max_level``, ``t = [t1, t2]``.
``[gauges]``
    ``points = [{id = "g1", x = ..., y = ...}, ...]``, ``fields`` (["surface",
    "depth"]), ``file`` ("gauges.csv"; ``.nc`` for NetCDF), ``crs`` (the coordinate
    system in words).
``[fgmax]``
    ``x = [x1, x2]``, ``y = [y1, y2]``, ``spacing``, ``arrival_tol`` (0.01 m), ``file``
    ("fgmax"), ``epsg``.
``[output]``
    ``vtk`` ("amr"/"flat"), ``interval`` or ``times = [...]`` or ``steps``: the frames
    (the command line's ``--vtk``/``--output-*`` take precedence).
"""

from __future__ import annotations

import math
import types
from pathlib import Path

import numpy as np

from forestpy.callbacks import SHALLOW_WATER_SI, Gauges
from forestpy.simulation import Domain

from .dtopo import make_dtopo_b4step, read_dtopo
from .fgmax import FGMax
from .forcing import IncidentWave, side_conditions
from .model import geoclaw_simulation
from .rasters import Raster, RasterError
from .refinement import Region
from .topography import Topography, TopographyError, TopographyStack, make_setaux

__all__ = ["ConfigError", "read_config", "demo_from_config", "setup", "report"]


class ConfigError(ValueError):
    """A configuration that cannot be used: the message names the table and key."""


#: table -> {key: (type(s), default)}; ``REQUIRED`` marks keys without a default
REQUIRED = object()
_NUM = (int, float)
SCHEMA = {
    "run": {"name": (str, "run"), "t_final": (_NUM, REQUIRED), "cfl": (_NUM, 0.9),
            "kind": (str, "geoclaw")},
    "domain": {"lower": (list, REQUIRED), "upper": (list, REQUIRED),
               "ntrees": (list, [1, 1])},
    "refinement": {"mx": (int, 16), "min_level": (int, 0), "max_level": (int, 2),
                   "regrid_interval": (int, 4), "wave_tolerance": (_NUM, 0.1),
                   "speed_tolerance": (_NUM, None), "depth_tolerance": (_NUM, None),
                   "shoreline": (bool, False)},
    "physics": {"grav": (_NUM, 9.81), "sea_level": (_NUM, 0.0),
                "dry_tolerance": (_NUM, 1e-3), "manning": (_NUM, 0.025),
                "speed_limit": (_NUM, 50.0), "riemann_solver": (str, "geoclaw"),
                "limiter": (str, "mc")},
    "topography": {"file": (str, None), "constant": (_NUM, None), "topotype": (int, None),
                   "registration": (str, None), "lower": (list, None)},
    "dtopo": {"file": (str, REQUIRED), "dtopotype": (int, None)},
    "boundary": {side: ((str, dict), "wall")
                 for side in ("x_lower", "x_upper", "y_lower", "y_upper")},
    "regions": {"x": (list, REQUIRED), "y": (list, REQUIRED), "min_level": (int, 0),
                "max_level": (int, 99), "t": (list, None)},
    "gauges": {"points": (list, REQUIRED), "fields": (list, ["surface", "depth"]),
               "file": (str, "gauges.csv"), "crs": (str, None)},
    "fgmax": {"x": (list, REQUIRED), "y": (list, REQUIRED), "spacing": (_NUM, REQUIRED),
              "arrival_tol": (_NUM, 1e-2), "file": (str, "fgmax"), "epsg": (int, None)},
    "output": {"vtk": (str, None), "interval": (_NUM, None), "times": (list, None),
               "steps": (int, None)},
}
LISTS = {"topography", "dtopo", "regions"}  # [[table]]: a list of entries


def _check_table(where: str, table, schema: dict) -> dict:
    if not isinstance(table, dict):
        raise ConfigError(f"[{where}] must be a table, got {type(table).__name__}")
    unknown = sorted(set(table) - set(schema))
    if unknown:
        raise ConfigError(f"[{where}]: unknown key(s) {unknown}; valid: {sorted(schema)}")
    out = {}
    for key, (kind, default) in schema.items():
        if key not in table:
            if default is REQUIRED:
                raise ConfigError(f"[{where}]: {key!r} is required")
            out[key] = default
            continue
        value = table[key]
        bad_bool = isinstance(value, bool) and kind is not bool
        if bad_bool or not isinstance(value, kind):
            names = kind.__name__ if isinstance(kind, type) else \
                " or ".join(k.__name__ for k in kind)
            raise ConfigError(f"[{where}] {key} = {value!r}: expected {names}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"[{where}] {key} = {value!r}: must be finite")
        out[key] = value
    return out


def _pair(where: str, value, integer: bool = False) -> tuple:
    ok = isinstance(value, list) and len(value) == 2 and all(
        isinstance(v, int if integer else _NUM) and not isinstance(v, bool) for v in value)
    if not ok or not all(math.isfinite(v) for v in value):
        what = "integers" if integer else "numbers"
        raise ConfigError(f"{where} = {value!r}: expected two {what}")
    return tuple(value)


def read_config(path) -> dict:
    """Read and check a configuration file; returns the tables with defaults filled in
    (lists for ``[[topography]]``, ``[[dtopo]]``, ``[[regions]]``) and ``base``, the
    folder file names are relative to.  Raises :class:`ConfigError`."""
    path = Path(path)
    try:
        import tomllib  # Python 3.11+
    except ImportError:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            raise ConfigError("configuration files need Python 3.11 (tomllib) or "
                              "pip install tomli") from None
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such configuration file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: a folder, not a configuration file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not a valid TOML file ({e})") from None
    unknown = sorted(set(raw) - set(SCHEMA))
    if unknown:
        raise ConfigError(f"{path}: unknown table(s) {unknown}; valid: {sorted(SCHEMA)}")
    for need in ("run", "domain", "topography"):
        if need not in raw:
            raise ConfigError(f"{path}: the table [{need}] is required")
    cfg = {"base": path.resolve().parent, "path": path}
    for name, schema in SCHEMA.items():
        if name in LISTS:
            entries = raw.get(name, [])
            if isinstance(entries, dict):
                entries = [entries]
            if not isinstance(entries, list):
                raise ConfigError(f"[[{name}]] must be a list of tables")
            cfg[name] = [_check_table(f"{name} {k + 1}", e, schema)
                         for k, e in enumerate(entries)]
        elif name in raw or name in ("run", "domain", "refinement", "physics", "boundary"):
            cfg[name] = _check_table(name, raw.get(name, {}), schema)
        else:
            cfg[name] = None
    _validate(cfg)
    return cfg


def _validate(cfg: dict) -> None:
    run, dom, ref = cfg["run"], cfg["domain"], cfg["refinement"]
    if run["kind"] != "geoclaw":
        raise ConfigError(f"[run] kind = {run['kind']!r}: only 'geoclaw' runs are known")
    if not run["t_final"] > 0:
        raise ConfigError(f"[run] t_final = {run['t_final']}: must be > 0")
    if not 0 < run["cfl"] <= 1:
        raise ConfigError(f"[run] cfl = {run['cfl']}: must be in (0, 1]")
    lo, hi = _pair("[domain] lower", dom["lower"]), _pair("[domain] upper", dom["upper"])
    nt = _pair("[domain] ntrees", dom["ntrees"], integer=True)
    if not (hi[0] > lo[0] and hi[1] > lo[1]) or min(nt) < 1:
        raise ConfigError(f"[domain]: need lower < upper and ntrees >= 1, got {dom}")
    sx, sy = (hi[0] - lo[0]) / nt[0], (hi[1] - lo[1]) / nt[1]
    if not math.isclose(sx, sy, rel_tol=1e-9):
        raise ConfigError(f"[domain]: trees must be square; (upper - lower) / ntrees gives "
                          f"{sx:g} x {sy:g}")
    if ref["mx"] < 4 or ref["mx"] % 4:
        raise ConfigError(f"[refinement] mx = {ref['mx']}: a multiple of 4, at least 4")
    if not 0 <= ref["min_level"] <= ref["max_level"] <= 18:
        raise ConfigError(f"[refinement]: need 0 <= min_level <= max_level <= 18, got "
                          f"{ref['min_level']}, {ref['max_level']}")
    if not cfg["topography"]:
        raise ConfigError("[[topography]]: at least one entry (a file or a constant)")
    for k, t in enumerate(cfg["topography"]):
        if (t["file"] is None) == (t["constant"] is None):
            raise ConfigError(f"[[topography]] {k + 1}: give 'file' or 'constant'")
        if t["registration"] not in (None, "node", "cell"):
            raise ConfigError(f"[[topography]] {k + 1}: registration must be 'node' or "
                              f"'cell', got {t['registration']!r}")
        if t["file"] is not None and not (cfg["base"] / t["file"]).is_file():
            raise ConfigError(f"[[topography]] {k + 1}: no such file {t['file']!r} "
                              f"(relative to {cfg['base']})")
    for k, d in enumerate(cfg["dtopo"]):
        if not (cfg["base"] / d["file"]).is_file():
            raise ConfigError(f"[[dtopo]] {k + 1}: no such file {d['file']!r}")
    for side, b in cfg["boundary"].items():
        if isinstance(b, str) and b not in ("wall", "extrap"):
            raise ConfigError(f"[boundary] {side} = {b!r}: 'wall', 'extrap' or "
                              "{incident_wave = 'file'}")
        if isinstance(b, dict):
            extra = set(b) - {"incident_wave", "skip_rows"}
            if "incident_wave" not in b or extra:
                raise ConfigError(f"[boundary] {side}: expected {{incident_wave = 'file', "
                                  f"skip_rows = 1}}, got {b}")
            if not (cfg["base"] / b["incident_wave"]).is_file():
                raise ConfigError(f"[boundary] {side}: no such file {b['incident_wave']!r}")
    for k, r in enumerate(cfg["regions"]):
        _pair(f"[[regions]] {k + 1} x", r["x"])
        _pair(f"[[regions]] {k + 1} y", r["y"])
        if r["t"] is not None:
            _pair(f"[[regions]] {k + 1} t", r["t"])
    if cfg["gauges"] is not None:
        for k, p in enumerate(cfg["gauges"]["points"]):
            if not (isinstance(p, dict) and set(p) == {"id", "x", "y"}):
                raise ConfigError(f"[gauges] points[{k}] = {p!r}: expected "
                                  "{id = ..., x = ..., y = ...}")
            if not (lo[0] <= p["x"] <= hi[0] and lo[1] <= p["y"] <= hi[1]):
                raise ConfigError(f"[gauges] {p['id']!r} at ({p['x']}, {p['y']}) lies "
                                  "outside the domain")
    if cfg["fgmax"] is not None:
        fx, fy = _pair("[fgmax] x", cfg["fgmax"]["x"]), _pair("[fgmax] y", cfg["fgmax"]["y"])
        if not (fx[1] > fx[0] and fy[1] > fy[0] and cfg["fgmax"]["spacing"] > 0):
            raise ConfigError(f"[fgmax]: need x1 < x2, y1 < y2 and spacing > 0, got "
                              f"{cfg['fgmax']}")
    out = cfg["output"]
    if out is not None and out["vtk"] not in (None, "amr", "flat"):
        raise ConfigError(f"[output] vtk = {out['vtk']!r}: 'amr' or 'flat'")


# --------------------------------------------------------------------------- the run
def _topography(cfg: dict, domain: Domain) -> TopographyStack:
    items = []
    (x0, y0), (x1, y1) = domain.lower, domain.upper
    for k, t in enumerate(cfg["topography"]):
        if t["constant"] is not None:
            r = Raster(np.full((2, 2), float(t["constant"])), x0, y0, x1 - x0, y1 - y0,
                       "node")
            items.append(Topography(r, f"constant {t['constant']}"))
            continue
        path = cfg["base"] / t["file"]
        try:
            topo = Topography.read(path, t["topotype"])
        except (RasterError, TopographyError, OSError) as e:
            raise ConfigError(f"[[topography]] {k + 1}: {e}") from None
        r = topo.raster
        if t["registration"] is not None or t["lower"] is not None:
            lower = _pair(f"[[topography]] {k + 1} lower", t["lower"]) if t["lower"] \
                else (r.x0, r.y0)
            r = Raster(r.z, lower[0], lower[1], r.dx, r.dy,
                       t["registration"] or r.registration)
            topo = Topography(r, str(path))
        items.append(topo)
    return TopographyStack(items)


def _series(path: Path, skip: int, where: str):
    try:
        a = np.loadtxt(path, skiprows=skip, ndmin=2)
    except ValueError as e:
        raise ConfigError(f"{where}: {path.name} is not a numeric table ({e})") from None
    if a.shape[1] < 2 or a.shape[0] < 2:
        raise ConfigError(f"{where}: {path.name} needs two columns (t, eta) and two rows")
    return a[:, 0].copy(), a[:, 1].copy()


def setup(cfg: dict):
    """The :class:`~forestpy.simulation.Simulation` of a checked configuration; the
    gauges and fgmax callbacks are in ``sim.callbacks`` and ``sim.config``."""
    run, dom, ref, phy = cfg["run"], cfg["domain"], cfg["refinement"], cfg["physics"]
    domain = Domain(lower=tuple(dom["lower"]), upper=tuple(dom["upper"]),
                    ntrees=tuple(dom["ntrees"]))
    stack = _topography(cfg, domain)
    (x0, y0), (x1, y1) = domain.lower, domain.upper
    setaux = make_setaux(stack, domain=(x0, x1, y0, y1))
    sides = {}
    for side, b in cfg["boundary"].items():
        if isinstance(b, dict):
            t, eta = _series(cfg["base"] / b["incident_wave"], int(b.get("skip_rows", 0)),
                             f"[boundary] {side}")
            sides[side] = IncidentWave(t, eta, grav=phy["grav"], sea_level=phy["sea_level"])
        else:
            sides[side] = b
    regions = [Region(*r["x"], *r["y"], min_level=r["min_level"], max_level=r["max_level"],
                      **({} if r["t"] is None else {"t1": r["t"][0], "t2": r["t"][1]}))
               for r in cfg["regions"]]
    callbacks = []
    g = cfg["gauges"]
    if g is not None:
        callbacks.append(Gauges({p["id"]: (p["x"], p["y"]) for p in g["points"]},
                                fields=g["fields"], units=SHALLOW_WATER_SI, crs=g["crs"]))
    f = cfg["fgmax"]
    if f is not None:
        n = max(2, round((f["x"][1] - f["x"][0]) / f["spacing"]) + 1)
        m = max(2, round((f["y"][1] - f["y"][0]) / f["spacing"]) + 1)
        callbacks.append(FGMax.grid(*f["x"], *f["y"], n, m, dry_tolerance=phy["dry_tolerance"],
                                    arrival_tol=f["arrival_tol"], epsg=f["epsg"],
                                    crs=g["crs"] if g is not None else None))
    extra = {}
    if cfg["dtopo"]:
        hook = None
        for d in cfg["dtopo"]:
            try:
                dt = read_dtopo(cfg["base"] / d["file"], d["dtopotype"])
            except (ValueError, OSError) as e:
                raise ConfigError(f"[[dtopo]] {d['file']}: {e}") from None
            hook = make_dtopo_b4step(dt, then=hook)
        extra["b4step"] = hook
    sim = geoclaw_simulation(
        setaux, domain=domain, sea_level=phy["sea_level"], grav=phy["grav"],
        dry_tolerance=phy["dry_tolerance"], manning=phy["manning"],
        speed_limit=phy["speed_limit"], wave_tolerance=ref["wave_tolerance"],
        speed_tolerance=ref["speed_tolerance"], depth_tolerance=ref["depth_tolerance"],
        shoreline=ref["shoreline"], regions=regions, bc=side_conditions(**sides),
        mx=ref["mx"], min_level=ref["min_level"], max_level=ref["max_level"],
        regrid_interval=ref["regrid_interval"], cfl_desired=run["cfl"], cfl_max=1.0,
        t_final=run["t_final"], limiter=phy["limiter"], transverse_waves=2,
        callbacks=callbacks, name=run["name"], riemann_solver=phy["riemann_solver"],
        **extra)
    sim.config = cfg
    return sim


def report(sim, out) -> dict:
    """Write the gauges (``[gauges] file`` and ``.vtp``) and the fgmax files into
    ``out``; returns what was written and the gauges' maxima."""
    out = Path(out)
    cfg = sim.config
    result: dict = {"config": str(cfg["path"]), "files": []}
    for cb in sim.callbacks:
        if isinstance(cb, Gauges):
            path = out / cfg["gauges"]["file"]
            if path.suffix == ".nc":
                cb.write_netcdf(path)
            else:
                cb.write(path)
            result["files"].append(path.name)
            try:
                result["files"].append(cb.write_vtp(path.with_suffix(".vtp")).name)
            except ImportError:  # vtk is optional
                pass
            data = cb.data()
            result["gauges"] = {str(gid): {f"max_{k}": float(np.nanmax(v))
                                           for k, v in d.items() if k not in ("t", "x", "y")}
                                for gid, d in data.items()}
        elif isinstance(cb, FGMax):
            result["files"] += [p.name for p in cb.write(out / cfg["fgmax"]["file"])]
    return result


def demo_from_config(path):
    """What ``forestpy run --config FILE`` runs: a demo-like namespace (``OPTIONS``,
    ``setup``, ``report``, ``output`` the ``[output]`` table, ``name``), the file read
    and checked now (:class:`ConfigError` on a problem)."""
    cfg = read_config(path)
    return types.SimpleNamespace(
        OPTIONS={}, setup=lambda **_: setup(cfg), report=report, output=cfg["output"],
        name=cfg["run"]["name"], config=cfg)
