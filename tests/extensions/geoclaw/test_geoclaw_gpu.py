"""GeoClaw's compiled hooks on the GPU backend against the CPU backend: the sources
(positivity with a domain-wide leftover, discharge, Manning friction, Coriolis on a
beta plane, speed limit, dry cells) and the incident-wave boundary.  Without a GPU the
kernels run in Numba's CUDA simulator: tiny cases."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from forestpy.extensions.geoclaw.forcing import IncidentWave
from forestpy.extensions.geoclaw.model import geoclaw_simulation
from forestpy.extensions.geoclaw.sources import Coriolis, DischargeSource

from forestpy import Domain

if not numba.config.ENABLE_CUDASIM:
    from numba import cuda

    if not cuda.is_available():
        pytest.skip("no GPU and the CUDA simulator is off", allow_module_level=True)


def sloping_lake(backend, **kw):
    """A lake over a bottom rising to dry land in +x: wet, dry and a shoreline; 4
    patches of 4 x 4 cells."""
    opts = dict(domain=Domain((0, 0), (100, 100)), mx=4, min_level=1, max_level=1,
                eta_init=lambda x, y: 0.3 + 0.2 * np.exp(-((x - 30) ** 2 + (y - 60) ** 2)
                                                          / 300.0),
                manning=0.03, coriolis=Coriolis(1e-3, beta=1e-5, y0=50.0),
                sources=[DischargeSource(20.0, 30.0, 5.0, radius=15.0),
                         DischargeSource(70.0, 70.0, lambda t: 2.0 + t)],
                speed_limit=2.0, t_final=16.0, backend=backend)
    opts.update(kw)
    return geoclaw_simulation(lambda x, y, dx, dy: -1.0 + 0.02 * x, **opts)


def host(sim, a):
    return np.asarray(sim.backend.to_host(a))


def crafted_state(sim):
    """Depths with negative cells, one patch lacking more than it holds (a domain-wide
    leftover), fast thin layers and dry cells."""
    rng = np.random.default_rng(5)
    q = host(sim, sim.q).copy()
    b = sim.mbc
    h = q[:, 0, b:-b, b:-b]
    h[...] = rng.uniform(0.0, 0.8, h.shape)
    h[0] = 0.002
    h[0, 1, 2] = -0.5  # patch 0 cannot cover this
    h[2, 3, 0] = -0.01  # patch 2 can
    h[1, :2] = 0.0005  # dry
    q[:, 1, b:-b, b:-b] = rng.normal(0.0, 1.5, h.shape) * h
    q[:, 2, b:-b, b:-b] = rng.normal(0.0, 1.5, h.shape) * h
    return q


@pytest.mark.parametrize("rows", [None, [3, 0]])
def test_sources_hook_on_a_crafted_state(rows):
    """One call of the hook on every patch or on a subset (a level of a subcycled
    step: the other patches give their share of the leftover)."""
    out, moved = [], []
    for backend in ("cpu", "gpu"):
        sim = sloping_lake(backend)
        be = sim.backend
        q = be.to_device(crafted_state(sim))
        ctx = sim.hook_context(1.5, 0.2, *(() if rows is None else (
            be.to_device(np.array(rows)), np.array(rows))))
        sim.geoclaw_sources.apply(q, sim.aux, ctx)  # compiles, makes the source cells
        q = be.to_device(crafted_state(sim))
        before = be.host_transfers
        sim.geoclaw_sources.apply(q, sim.aux, ctx)
        assert be.host_transfers == before  # nothing read back, leftover included
        out.append(host(sim, q))
        moved.append(float(host(sim, sim.geoclaw_sources._pending[2][0])[1]))
    b = 2
    cpu, gpu = out[0][:, :, b:-b, b:-b], out[1][:, :, b:-b, b:-b]
    assert np.abs(gpu - cpu).max() <= 1e-13 * np.abs(cpu).max()
    assert moved[0] == pytest.approx(moved[1], rel=1e-13)
    lacking = 0.5 + (0.01 if rows is None else 0.0)  # patch 2 is not in the subset
    assert moved[0] == pytest.approx(lacking * 12.5**2, rel=1e-14)
    assert (cpu[rows if rows is not None else slice(None), 0] >= 0).all()
    crafted = crafted_state(sloping_lake("cpu"))[:, :, b:-b, b:-b]
    untouched = [k for k in range(4) if rows is not None and k not in rows]
    for k in untouched:  # scaled by the domain-wide factor only
        ratio = cpu[k, 0][crafted[k, 0] > 0] / crafted[k, 0][crafted[k, 0] > 0]
        assert np.allclose(ratio, ratio[0], rtol=1e-14) and 0.9 < ratio[0] < 1.0


@pytest.mark.slow  # CUDA-simulator run; CI's slow step
def test_whole_run_with_every_source_agrees_on_both_backends():
    cpu = sloping_lake("cpu").run()
    gpu = sloping_lake("gpu").run()
    assert cpu.steps == gpu.steps > 3
    b = cpu.mbc
    qc, qg = cpu.q[:, :, b:-b, b:-b], host(gpu, gpu.q)[:, :, b:-b, b:-b]
    assert gpu.geoclaw_sources.volume_added == cpu.geoclaw_sources.volume_added > 0
    if numba.config.ENABLE_CUDASIM:
        # bit for bit: the GPU kernels do the CPU's operations in the CPU's order
        np.testing.assert_array_equal(qg, qc)
        assert (gpu.geoclaw_sources.volume_redistributed
                == cpu.geoclaw_sources.volume_redistributed)
    else:
        # on a device the beta plane's per-cell cos and sin come from CUDA's math
        # library, which may differ from the host's in the last place
        assert np.abs(qg - qc).max() <= 1e-12 * np.abs(qc).max()


@pytest.mark.slow  # CUDA-simulator run; CI's slow step
def test_incident_wave_on_both_backends_and_as_arrays():
    """The pointwise incident wave (one launch per side) against the array-level call of
    the same object, on the CPU and the GPU backends."""
    wave = IncidentWave([0.0, 2.0, 4.0], [0.0, 0.05, -0.02], grav=9.81, sea_level=0.0)
    runs = []
    for backend in ("cpu", "gpu"):
        sim = sloping_lake(backend, bc=(wave, "extrap", "wall", "wall"), coriolis=None,
                           sources=(), t_final=3.0)
        runs.append(sim.run())
    cpu, gpu = runs
    assert cpu.steps == gpu.steps
    b = cpu.mbc
    qc, qg = cpu.q[:, :, b:-b, b:-b], host(gpu, gpu.q)[:, :, b:-b, b:-b]
    np.testing.assert_array_equal(qg, qc)
    # the ghost cells of x_lower, filled once more by each form
    from forestpy.patches.boundary import apply_physical_bc

    q1 = cpu.q.copy()
    apply_physical_bc(q1, cpu.geom, cpu.bc, cpu.riemann.wall_reflect, 2.7, cpu.aux,
                      backend=cpu.backend, context=cpu.hook_context(2.7))
    q2 = cpu.q.copy()
    sides = cpu.geom.on_side(0)
    sub = q2[sides]
    wave(0, sub, cpu.aux[sides], None, None, 2.7)
    q2[sides, :, :, :b] = sub[:, :, :, :b]
    assert np.array_equal(q1[sides, :, :, :b], q2[sides, :, :, :b])
    assert (q1[sides, 1, :, :b] > 0).any()
