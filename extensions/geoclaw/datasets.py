"""Loaders for the data vendored in ``demos/geoclaw/data`` (see its README.md).

Okushiri (Monai valley wave tank), Merewether (urban flash flood), the Eden 5 m DEM
and GeoClaw's sample files.  Every loader takes ``data_dir`` (default: the vendored
folder of this checkout) and returns plain NumPy arrays or :class:`Raster` objects.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .rasters import Raster, RasterError, fill_nodata, read_esri_ascii, read_geotiff

__all__ = [
    "DATA_DIR", "okushiri_bathymetry", "okushiri_input_wave", "okushiri_gauges",
    "OKUSHIRI_GAUGES", "merewether_dem", "merewether_houses", "merewether_road",
    "merewether_extent", "merewether_observations", "merewether_topography",
    "merewether_manning", "MEREWETHER_INFLOW", "points_in_polygon", "eden_dem",
]

DATA_DIR = Path(__file__).resolve().parents[2] / "demos" / "geoclaw" / "data"

#: gauge positions (m) of the Monai valley benchmark
OKUSHIRI_GAUGES = {"ch5": (4.521, 1.196), "ch7": (4.521, 1.696), "ch9": (4.521, 2.196)}
#: inflow of the Merewether event: discharge (m^3/s) in a disc (centre, radius m)
MEREWETHER_INFLOW = {"discharge": 19.7, "centre": (382265.0, 6354280.0), "radius": 10.0}


def _dir(data_dir, name):
    d = Path(data_dir or DATA_DIR) / name
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: data folder missing (see demos/geoclaw/data/README.md)")
    return d


def _table(path, skip=1, ncols=None, delimiter=None):
    try:
        a = np.loadtxt(path, skiprows=skip, delimiter=delimiter, ndmin=2)
    except ValueError as e:
        raise RasterError(f"{path}: not a numeric table: {e}") from None
    if ncols is not None and a.shape[1] != ncols:
        raise RasterError(f"{path}: {a.shape[1]} columns, expected {ncols}")
    return a


# ----------------------------------------------------------------------------- Okushiri
def okushiri_bathymetry(data_dir=None) -> Raster:
    """Bed elevation (m, still water at 0), 393 x 244 cells of 0.014 m from (0, 0)."""
    return read_esri_ascii(_dir(data_dir, "okushiri") / "Benchmark_2_Bathymetry.asc")


def okushiri_input_wave(data_dir=None):
    """``(t, eta)``: incident surface elevation (m) at x = 0 versus time (s)."""
    a = _table(_dir(data_dir, "okushiri") / "Benchmark_2_input.txt", ncols=2)
    return a[:, 0].copy(), a[:, 1].copy()


def okushiri_gauges(data_dir=None):
    """``(t, {name: eta})``: measured surface elevation in metres (file: centimetres)."""
    a = _table(_dir(data_dir, "okushiri") / "output_ch5-7-9.txt", ncols=4)
    return a[:, 0].copy(), {k: a[:, 1 + n] / 100.0 for n, k in enumerate(OKUSHIRI_GAUGES)}


# ----------------------------------------------------------------------------- Merewether
def merewether_dem(data_dir=None, fill: bool = True) -> Raster:
    """1 m DEM (MGA zone 56), 321 x 416 cells.  73 NODATA cells on the border (the
    first column and a few more) are filled from their neighbours when ``fill``
    (else NaN)."""
    dem = read_esri_ascii(_dir(data_dir, "merewether") / "topography1.asc")
    return fill_nodata(dem) if fill else dem


def merewether_houses(data_dir=None) -> list[np.ndarray]:
    """The 60 building footprints, each an ``(n, 2)`` polygon."""
    files = sorted((_dir(data_dir, "merewether") / "houses").glob("house*.csv"))
    return [_table(f, skip=0, ncols=2, delimiter=",") for f in files]


def merewether_road(data_dir=None) -> np.ndarray:
    return _table(_dir(data_dir, "merewether") / "Road" / "RoadPolygon.csv", 0, 2, ",")


def merewether_extent(data_dir=None) -> np.ndarray:
    return _table(_dir(data_dir, "merewether") / "extent.csv", 0, 2, ",")


def merewether_observations(data_dir=None) -> dict:
    """Observation points: ``x, y, id``, observed peak stage (draft and final ARR report)
    and the TUFLOW peak stage (m), one array each."""
    a = _table(_dir(data_dir, "merewether") / "Observations" / "ObservationPoints.csv",
               1, 6, ",")
    return {"x": a[:, 0], "y": a[:, 1], "id": a[:, 2].astype(int), "stage_draft": a[:, 3],
            "stage_observed": a[:, 4], "stage_tuflow": a[:, 5]}


def points_in_polygon(x, y, poly) -> np.ndarray:
    """Even-odd rule, vectorised over points (loop over the polygon's edges)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    poly = np.asarray(poly, float)
    inside = np.zeros(np.broadcast(x, y).shape, bool)
    xa, ya = poly[:, 0], poly[:, 1]
    xb, yb = np.roll(xa, -1), np.roll(ya, -1)
    for k in range(len(poly)):
        crosses = (ya[k] > y) != (yb[k] > y)
        with np.errstate(divide="ignore", invalid="ignore"):
            xc = xa[k] + (y - ya[k]) * (xb[k] - xa[k]) / (yb[k] - ya[k])
        inside ^= crosses & (x < xc)
    return inside


def merewether_topography(house_height: float = 3.0, data_dir=None,
                          fill: bool = True) -> Raster:
    """The DEM with every building footprint raised by ``house_height`` (m): value
    points inside a footprint polygon (point-in-polygon on the DEM grid)."""
    dem = merewether_dem(data_dir, fill)
    X, Y = np.meshgrid(dem.x, dem.y)
    mask = np.zeros(X.shape, bool)
    for poly in merewether_houses(data_dir):
        mask |= points_in_polygon(X, Y, poly)
    z = np.where(mask, dem.z + house_height, dem.z)
    return Raster(z, dem.x0, dem.y0, dem.dx, dem.dy, dem.registration, dem.nodata,
                  {**dem.meta, "houses": mask})


def merewether_manning(x, y, road: float = 0.02, other: float = 0.04, data_dir=None):
    """Manning n at points: ``road`` inside the road polygon, ``other`` elsewhere."""
    return np.where(points_in_polygon(x, y, merewether_road(data_dir)), road, other)


# ----------------------------------------------------------------------------- Eden
def eden_dem(data_dir=None) -> Raster:
    """5 m DEM of the river Eden valley (British National Grid, EPSG 27700); NaN outside
    the surveyed area."""
    return read_geotiff(_dir(data_dir, "eden_dem") / "DEM.tif")
