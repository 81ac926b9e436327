"""Exact topography cell averages: cells per second (one JSON record per line)."""
import json
import platform
import time

import numpy as np
from forestpy.extensions.geoclaw import datasets as ds
from forestpy.extensions.geoclaw.rasters import Raster
from forestpy.extensions.geoclaw.topography import TopographyStack, cell_averages


def patches(x0, x1, y0, y1, npatch, m, dx, rng):
    """npatch patches of (m+4)^2 cells (ghosts included) of size dx at random places."""
    i = np.arange(-2, m + 2) + 0.5
    px = rng.uniform(x0, x1 - m * dx, npatch)[:, None, None]
    py = rng.uniform(y0, y1 - m * dx, npatch)[:, None, None]
    x = px + dx * i[None, None, :] + 0 * i[None, :, None]
    y = py + dx * i[None, :, None] + 0 * i[None, None, :]
    return x, y


def bench(name, stack, x, y, dx, repeat=3):
    cell_averages(stack, x[:1], y[:1], dx, dx)  # compile
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        cell_averages(stack, x, y, dx, dx)
        best = min(best, time.perf_counter() - t)
    print(json.dumps({"bench": "topo_cell_averages", "case": name, "cells": int(x.size),
                      "cell_over_topo_spacing": dx / stack.topos[0].resolution[0],
                      "files": len(stack.topos), "seconds": best,
                      "cells_per_s": x.size / best,
                      "cpu": platform.processor() or platform.machine()}))


rng = np.random.default_rng(0)
ok = TopographyStack(ds.okushiri_bathymetry())
for dx, npatch in ((0.014 / 2, 3000), (0.014, 3000), (0.014 * 8, 1000)):
    x, y = patches(0.05, 5.4, 0.05, 3.35, npatch, 16, dx, rng)
    bench(f"okushiri dx={dx:.4g}", ok, x, y, dx)
fine = Raster(ok.topos[0].z[60:140, 250:350], 3.5, 0.85, 0.0035, 0.0035)
two = TopographyStack([ok.topos[0], fine])
x, y = patches(0.05, 5.4, 0.05, 3.35, 3000, 16, 0.007, rng)
bench("okushiri + finer nested file, dx=0.007", two, x, y, 0.007)
