"""GPU paths of the patch operations against the CPU paths (forestpy.patches).

Ghost fill, physical boundaries, time sync and regrid transfer run on the GPU backend
and must give the CPU's answer: bitwise wherever the arithmetic is the same.  Without
a GPU the kernels run in Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, which
tests/conftest.py sets by default): Python threads on NumPy arrays, slow, hence tiny
forests (mx = 4..8, a handful of patches).  With ``NUMBA_ENABLE_CUDASIM=0`` on a machine
with a GPU and CuPy the same tests run on the device.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest


def _gpu_backend_or_skip():
    if not numba.config.ENABLE_CUDASIM:
        from numba import cuda

        if not cuda.is_available():
            pytest.skip(
                "no GPU and Numba's CUDA simulator is off (set NUMBA_ENABLE_CUDASIM=1 to "
                "run the GPU code paths on the CPU)",
                allow_module_level=True,
            )
    from forestpy.backend import GPUBackend

    try:
        return GPUBackend()
    except RuntimeError as exc:  # a GPU but no CuPy, say
        pytest.skip(f"GPU backend unavailable: {exc}", allow_module_level=True)


GPU = _gpu_backend_or_skip()

from forests import interior_mask, refined_forest  # noqa: E402

from forestpy.backend import CPUBackend  # noqa: E402
from forestpy.cuda_device import kernel_launches  # noqa: E402
from forestpy.forest import Brick, Forest  # noqa: E402
from forestpy.patches import (  # noqa: E402
    PatchGeometry,
    apply_physical_bc,
    apply_time_sync,
    build_ghost_plan,
    build_time_sync_plan,
    fill_ghosts,
    normalize_bc,
    transfer,
)
from forestpy.patches.ghost_plan import positive_mask  # noqa: E402

BRICKS = {
    "1x1": Brick(),
    "3x2": Brick(3, 2, lower=(-1.0, 0.5), upper=(2.0, 2.5)),
    "per_x": Brick(2, 1, periodic_x=True, upper=(2.0, 1.0)),
    "per_xy": Brick(periodic_x=True, periodic_y=True),
}


def dev(a):
    # a copy, as on a GPU: in the simulator to_device returns NumPy's asarray, which
    # aliases a float64 host array
    return GPU.to_device(np.array(a))


def host(a):
    return GPU.to_host(a)


def assert_same(gpu_array, cpu_array):
    """Bitwise equal (NaNs in the same places)."""
    np.testing.assert_array_equal(host(gpu_array), cpu_array, strict=True)


def assert_same_arithmetic(gpu_array, cpu_array):
    """Bitwise equal in the simulator; to 1e-14 relative on a real GPU, whose compiler
    contracts multiply-adds (one rounding where the CPU has two)."""
    if GPU.simulator:
        assert_same(gpu_array, cpu_array)
    else:
        np.testing.assert_allclose(host(gpu_array), cpu_array, rtol=1e-14, atol=0)


def small_forest(conn, seed, base=1, nrefine=1):
    """``base``-level uniform forest with ``nrefine`` random leaves refined, balanced."""
    f = refined_forest(conn, seed, base, nrefine)
    assert len(np.unique(f.level)) == 2
    return f


# --------------------------------------------------------------------------------------
# ghost fill
# --------------------------------------------------------------------------------------

GHOST_CASES = [("1x1", 4, 4, 2, 3), ("3x2", 4, 4, 2, 0), ("per_x", 6, 4, 2, 1),
               ("per_xy", 6, 6, 3, 1)]


@pytest.mark.parametrize("brick,mx,my,mbc,seed", GHOST_CASES)
def test_ghost_fill_matches_cpu_bitwise(brick, mx, my, mbc, seed):
    """Copy, average and interpolation (with positive clipping) on an adaptive forest;
    ghost cells outside the domain stay NaN on both."""
    conn = BRICKS[brick]
    f = small_forest(conn, seed, base=0 if brick == "3x2" else 1)
    geom = PatchGeometry.from_forest(f, mx, my, mbc)
    plan = build_ghost_plan(f, geom)
    assert min(plan.counts.values()) > 0, plan.counts
    rng = np.random.default_rng(seed)
    # component 0 non-negative and spiky (clipping happens next to physical
    # boundaries), component 1 signed
    q = np.stack(
        [rng.random((geom.npatch,) + geom.shape) ** 4,
         rng.standard_normal((geom.npatch,) + geom.shape)], axis=1
    )
    q[:, :, ~interior_mask(geom)] = np.nan
    cpu = q.copy()
    fill_ghosts(plan, cpu, positive=(0,))
    gplan = plan.to(GPU)
    gq = dev(q)
    transfers, launches = GPU.host_transfers, kernel_launches()
    fill_ghosts(gplan, gq, positive=(0,), backend=GPU)
    assert GPU.host_transfers == transfers
    assert kernel_launches() - launches == 1  # the three kinds in one launch
    assert_same(gq, cpu)
    # the same with a precomputed device mask, and without clipping
    gq = dev(q)
    fill_ghosts(gplan, gq, positive=positive_mask(2, (0,), GPU), backend=GPU)
    assert_same(gq, cpu)
    unclipped = q.copy()
    fill_ghosts(plan, unclipped)
    gq = dev(q)
    fill_ghosts(gplan, gq, backend=GPU)
    assert_same(gq, unclipped)
    if not (geom.periodic_x and geom.periodic_y):
        # the clip did something (so the mask reached the kernel)
        assert np.nanmin(unclipped[:, 0]) < 0.0 <= np.nanmin(cpu[:, 0])


@pytest.mark.parametrize("brick,mx,my,mbc,seed", GHOST_CASES)
def test_ghost_plan_built_on_the_device_is_the_host_plan(brick, mx, my, mbc, seed):
    """The plan built by the CUDA kernels (the host build's per-patch bodies) is the host
    plan entry for entry; only two small records cross to the host, no plan upload."""
    f = small_forest(BRICKS[brick], seed, base=0 if brick == "3x2" else 1)
    geom = PatchGeometry.from_forest(f, mx, my, mbc)
    plan = build_ghost_plan(f, geom)
    transfers = GPU.host_transfers
    gplan = build_ghost_plan(f, geom, backend=GPU)
    assert GPU.host_transfers - transfers == 2  # entry counts, balance check
    for name in plan.__dataclass_fields__:
        assert_same(getattr(gplan, name), getattr(plan, name))


def test_ghost_plan_on_the_device_refuses_an_unbalanced_forest():
    f = Forest.new(Brick(), 1)
    f = f.refine(np.arange(f.n) == 0)
    f = f.refine(np.arange(f.n) == 1)  # touches a leaf two levels coarser
    geom = PatchGeometry.from_forest(f, 4, 4, 2)
    with pytest.raises(ValueError, match="balanced"):
        build_ghost_plan(f, geom, backend=GPU)


@pytest.mark.parametrize("brick,mx,my,mbc,seed", GHOST_CASES)
def test_time_sync_plan_built_on_the_device_is_the_host_plan(brick, mx, my, mbc, seed):
    """The coarse-fine faces found by the CUDA kernels (covering-leaf searches) give the
    host plan entry for entry, periodic and multi-tree bricks included; one small
    record crosses to the host."""
    f = small_forest(BRICKS[brick], seed, base=0 if brick == "3x2" else 1, nrefine=2)
    geom = PatchGeometry.from_forest(f, mx, my, mbc)
    plan = build_time_sync_plan(f, geom)
    assert len(plan)
    transfers = GPU.host_transfers
    gplan = build_time_sync_plan(f, geom, backend=GPU)
    assert GPU.host_transfers - transfers == 1
    assert gplan.nx == plan.nx
    for name in ("coarse", "fine", "coarse_edge", "fine_edge", "ixy", "sign", "width"):
        assert_same(getattr(gplan, name), getattr(plan, name))


@pytest.mark.parametrize("shape,mbc", [((2, 3, 8, 9), 2), ((1, 1, 10, 7), 3)])
def test_ghost_frame_copy_is_one_launch(shape, mbc):
    """The ghost cells (only) of one padded array into another, as the array slices do."""
    from forestpy.patches.ghost_plan import copy_ghost_frame

    rng = np.random.default_rng(9)
    src, dst = rng.random(shape), rng.random(shape)
    want = dst.copy()
    copy_ghost_frame(src, want, mbc)
    got = dev(dst)
    launches = kernel_launches()
    copy_ghost_frame(dev(src), got, mbc, GPU)
    assert kernel_launches() - launches == 1
    assert_same(got, want)


def test_ghost_fill_cpu_backend_is_the_cpu_path():
    f = small_forest(BRICKS["1x1"], 3)
    geom = PatchGeometry.from_forest(f, 4, 4, 2)
    plan = build_ghost_plan(f, geom)
    q = np.random.default_rng(0).standard_normal((geom.npatch, 2) + geom.shape)
    a, b = q.copy(), q.copy()
    fill_ghosts(plan, a, (1,))
    fill_ghosts(plan.to(CPUBackend()), b, (1,), backend=CPUBackend())
    assert np.array_equal(a, b)


def test_ghost_fill_empty_lists_are_skipped():
    """A uniform forest has copies only: the average and interpolation kernels are not
    launched with empty grids."""
    f = Forest.new(BRICKS["per_xy"], 1)
    geom = PatchGeometry.from_forest(f, 4, 4, 2)
    plan = build_ghost_plan(f, geom)
    assert plan.counts["average"] == plan.counts["interpolate"] == 0
    q = np.random.default_rng(1).standard_normal((geom.npatch, 1) + geom.shape)
    cpu = q.copy()
    fill_ghosts(plan, cpu)
    gq = dev(q)
    fill_ghosts(plan.to(GPU), gq, backend=GPU)
    assert_same(gq, cpu)


class _LaunchRecorder:
    """Stands in for a compiled kernel: records the stream of each launch
    configuration, launches the kernel on the default stream."""

    def __init__(self, kernel, streams):
        self.kernel, self.streams = kernel, streams

    def __getitem__(self, config):
        self.streams.append(config[2] if len(config) > 2 else None)
        return self.kernel[config[:2]]


def test_patch_kernels_launch_on_the_stream_that_on_stream_sets(monkeypatch):
    """The overlapped distributed step runs the halo unpack and the late patches' ghost
    fill on a second stream (forestpy.cuda_device.on_stream); a patch kernel launched
    without launch_stream() would go to the default stream, unordered with that work.
    Every launch of the plain and surface ghost fills, the physical boundaries and the
    regrid transfer must take the stream that on_stream sets, and 0 outside it."""
    import forestpy.cuda_device as cd
    from forestpy.patches import launch
    from forestpy.patches.surface_ghosts import fill_ghosts_surface

    streams = []
    compile_kernel = launch._gpu_function
    monkeypatch.setattr(launch, "_gpu_function", lambda *a, **k: _LaunchRecorder(
        compile_kernel(*a, **k), streams))
    f = small_forest(BRICKS["1x1"], 3)
    geom = PatchGeometry.from_forest(f, 4, 4, 2)
    gplan = build_ghost_plan(f, geom).to(GPU)
    rng = np.random.default_rng(2)
    q = dev(rng.random((geom.npatch, 3) + geom.shape) + 1.0)
    aux = dev(rng.random((geom.npatch, 1) + geom.shape))
    bc = normalize_bc("wall", False, False)
    new = f.refine(np.arange(f.n) == 0).balance()
    new_geom = PatchGeometry.from_forest(new, 4, 4, 2)

    def every_launch():
        fill_ghosts(gplan, q, positive=(0,), backend=GPU)
        fill_ghosts_surface(gplan, q, aux, 0, 0, positive=(), backend=GPU)
        apply_physical_bc(q, geom, bc, ((1,), (2,)), backend=GPU)
        transfer(f, geom, q, new, new_geom, backend=GPU)

    every_launch()
    n = len(streams)
    assert n >= 7 and set(streams) == {0}, streams  # fills, 4 sides, transfer cases
    sentinel = object()
    monkeypatch.setattr(cd, "_NUMBA_STREAM", sentinel)
    every_launch()
    assert len(streams) == 2 * n and all(s is sentinel for s in streams[n:]), streams[n:]


@pytest.mark.skipif(GPU.simulator, reason="streams run concurrently on a real GPU only")
def test_side_stream_orders_its_work_with_the_default_stream_and_runs_beside_it():
    """The ordering the overlapped distributed step relies on (``SideStream``): work
    queued on the side stream after ``follow_default()`` sees the default stream's
    earlier work, work queued on the default stream after ``join_default()`` sees the
    side stream's, and the side stream does not wait for later default-stream work.
    Each kernel that must be waited for runs ~50 ms before it writes, so a missing wait
    shows."""
    import cupy
    from numba import cuda

    from forestpy.cuda_device import launch_stream
    from forestpy.parallel.exchange import SideStream

    @cuda.jit
    def slow_write(a, value, n):
        # a dependent chain of n multiply-adds (~10 ns each): a delay the compiler cannot
        # drop (nanosleep proved far shorter than asked for)
        acc = 0.0
        for _ in range(n):
            acc = acc * 0.999999 + 1.0
        a[0] = value + 0.0 * acc

    @cuda.jit
    def copy(dst, src):
        dst[0] = src[0]

    a, b, c, d, e = (cupy.zeros(1) for _ in range(5))
    slow_write[1, 1](e, 0.0, 0)  # compiled now: no compilation inside the timed part
    copy[1, 1](e, e)
    d[...] = c  # CuPy's kernel too (a compilation would delay the host past the race)
    cupy.cuda.Device().synchronize()
    side = SideStream(True)
    assert side.stream.priority < cupy.cuda.Stream(non_blocking=True).priority
    # follow_default: the side stream waits for earlier default-stream work only
    slow_write[1, 1](a, 1.0, 5_000_000)  # default stream, ~50 ms
    side.follow_default()
    slow_write[1, 1](e, 3.0, 50_000_000)  # default stream, ~0.5 s, after follow_default
    with side.active():
        assert launch_stream() != 0
        copy[1, 1, launch_stream()](b, a)
    side.stream.synchronize()
    # before reading b (a copy on the default stream, which would wait for e)
    assert not cupy.cuda.Stream.null.done  # e still runs: the side did not wait for it
    assert float(b[0]) == 1.0
    cupy.cuda.Device().synchronize()
    # join_default: later default-stream work waits for the side stream's
    with side.active():
        slow_write[1, 1, launch_stream()](c, 2.0, 5_000_000)
        d[...] = c  # CuPy work goes to the side stream too
    side.join_default()
    copy[1, 1](a, d)  # default stream
    assert float(a[0]) == 2.0 and float(e[0]) == 3.0
    assert launch_stream() == 0


@pytest.mark.skipif(GPU.simulator, reason="in the simulator NumPy arrays are device arrays")
def test_gpu_kernels_refuse_host_arrays():
    f = small_forest(BRICKS["1x1"], 3)
    geom = PatchGeometry.from_forest(f, 4, 4, 2)
    plan = build_ghost_plan(f, geom)
    with pytest.raises(TypeError, match="host NumPy array"):
        fill_ghosts(plan, dev(np.zeros((geom.npatch, 1) + geom.shape)), backend=GPU)


# --------------------------------------------------------------------------------------
# physical boundaries
# --------------------------------------------------------------------------------------


def bc_case(brick, seed=5):
    f = small_forest(BRICKS[brick], seed, base=0 if brick == "3x2" else 1)
    geom = PatchGeometry.from_forest(f, 6, 4, 2)
    # random everywhere, ghost cells included: corners show which side wrote last
    q = np.random.default_rng(seed).standard_normal((geom.npatch, 3) + geom.shape)
    return geom, q


BC_CASES = [
    ("1x1", "extrap"),
    ("1x1", "wall"),
    ("3x2", ("wall", "extrap", "extrap", "wall")),
    ("per_x", ("periodic", "periodic", "wall", "extrap")),
]


@pytest.mark.parametrize("brick,bc", BC_CASES)
def test_extrap_and_wall_match_cpu_bitwise(brick, bc):
    geom, q = bc_case(brick)
    bc = normalize_bc(bc, geom.periodic_x, geom.periodic_y)
    reflect = ((1,), (2,))
    cpu = q.copy()
    apply_physical_bc(cpu, geom, bc, reflect)
    assert not np.array_equal(cpu, q)
    sides = [dev(geom.on_side(s)) for s in range(4)]
    gq = dev(q)
    transfers = GPU.host_transfers
    apply_physical_bc(gq, geom, bc, reflect, backend=GPU, sides=sides)
    assert GPU.host_transfers == transfers
    assert_same(gq, cpu)
    # sides computed (and uploaded) by apply_physical_bc itself
    gq = dev(q)
    apply_physical_bc(gq, geom, bc, reflect, backend=GPU)
    assert_same(gq, cpu)


def test_wall_reflects_several_components():
    geom, q = bc_case("1x1")
    bc = normalize_bc("wall", False, False)
    reflect = ((1, 2), ())
    cpu = q.copy()
    apply_physical_bc(cpu, geom, bc, reflect)
    gq = dev(q)
    apply_physical_bc(gq, geom, bc, reflect, backend=GPU)
    assert_same(gq, cpu)


def test_callable_boundary_gets_backend_arrays_and_matches_cpu():
    geom, q = bc_case("1x1")
    xc, yc = geom.cell_centers()
    array_type = type(GPU.xp.zeros(0))
    b = geom.mbc

    def user(side, sub, aux, x, y, t):
        # array-module agnostic: slicing and arithmetic only
        assert isinstance(sub, type(x)) and isinstance(aux, type(x))
        if side == 0:
            sub[..., :b] = 2.0 * sub[..., b : b + 1] + x[:, None, :, :b] + t
        elif side == 1:
            sub[..., -b:] = aux[:, :1, :, -b:] - y[:, None, :, -b:]
        elif side == 2:
            sub[..., :b, :] = -sub[..., b : 2 * b, :]
        else:
            sub[..., -b:, :] = 7.0
        sub[:, :, b:-b, b:-b] = -1.0  # scribbles on the interior are not copied back

    aux = np.random.default_rng(6).standard_normal((geom.npatch, 1) + geom.shape)
    cpu = q.copy()
    apply_physical_bc(cpu, geom, (user,) * 4, ((), ()), t=0.5, aux=aux,
                      centers=lambda i: (xc[i], yc[i]))
    gx, gy = dev(xc), dev(yc)
    seen = []

    def gpu_user(side, sub, aux, x, y, t):
        seen.append(all(isinstance(a, array_type) for a in (sub, aux, x, y)))
        user(side, sub, aux, x, y, t)

    gq = dev(q)
    apply_physical_bc(gq, geom, (gpu_user,) * 4, ((), ()), t=0.5, aux=dev(aux),
                      centers=lambda i: (gx[i], gy[i]), backend=GPU,
                      sides=[dev(geom.on_side(s)) for s in range(4)])
    assert seen == [True] * 4
    assert_same(gq, cpu)


# --------------------------------------------------------------------------------------
# time sync
# --------------------------------------------------------------------------------------

A = ((0.8, -0.3), (0.2, 1.1))  # f(q) = A q (x-flux)
B = ((-0.5, 0.4), (0.7, 0.3))  # g(q) = B q (y-flux)


def linear_fluctuations(ixy, ql, qr, auxl, auxr, params, out):
    """amdq + apdq = M (qr - ql), written elementwise (any array module, same rounding)."""
    M = A if ixy == 1 else B
    d = qr - ql
    for m in range(2):
        out[:, m] = M[m][0] * d[:, 0] + M[m][1] * d[:, 1]


def sync_case(seed, mx=4, my=4, conn=None):
    f = small_forest(conn or Brick(), seed, base=1, nrefine=2)
    geom = PatchGeometry.from_forest(f, mx, my, 2)
    plan = build_time_sync_plan(f, geom)
    rng = np.random.default_rng(seed)
    n = geom.npatch
    q_old = rng.standard_normal((n, 2) + geom.shape)
    q_new = rng.standard_normal((n, 2) + geom.shape)
    edge = rng.standard_normal((n, 4, 2, max(mx, my)))
    aux = 0.5 + rng.random((n, 2) + geom.shape)  # aux 1 is a capacity
    return f, geom, plan, q_old, q_new, edge, aux


def test_time_sync_plan_layout():
    """x-normal entries first; per direction every coarse cell at most once (the
    fancy-index ``+=`` of apply_time_sync relies on it); widths from the geometry."""
    both = 0
    for seed, (mx, my) in ((0, (4, 4)), (1, (8, 4)), (2, (4, 6)), (3, (4, 4))):
        f, geom, plan, *_ = sync_case(seed, mx, my)
        assert len(plan) > 0 and plan.nx % 2 == 0
        both += 0 < plan.nx < len(plan)
        assert np.all(plan.ixy[: plan.nx] == 1) and np.all(plan.ixy[plan.nx :] == 2)
        cc = plan.coarse[0::2]
        assert np.array_equal(cc, plan.coarse[1::2])
        for sel in (slice(0, plan.nx // 2), slice(plan.nx // 2, None)):
            cells = cc[sel]
            assert len(np.unique(cells, axis=0)) == len(cells)
        p = cc[:, 0]
        expected = np.where(plan.ixy[0::2] == 1, geom.dx[p], geom.dy[p])
        assert np.array_equal(plan.width, expected)
    assert both >= 2


@pytest.mark.parametrize("capacity", [-1, 1])
@pytest.mark.parametrize("seed", [0, 1])
def test_time_sync_matches_cpu(seed, capacity):
    f, geom, plan, q_old, q_new, edge, aux = sync_case(seed)
    dt = 0.013
    cpu = q_new.copy()
    apply_time_sync(plan, q_old, cpu, aux, edge, geom, dt, linear_fluctuations, None,
                    capacity)
    assert not np.array_equal(cpu, q_new)
    gq = dev(q_new)
    transfers = GPU.host_transfers
    apply_time_sync(plan.to(GPU), dev(q_old), gq, dev(aux), dev(edge), None, dt,
                    linear_fluctuations, None, capacity, backend=GPU)
    assert GPU.host_transfers == transfers
    got = host(gq)
    np.testing.assert_allclose(got, cpu, rtol=1e-14, atol=0)
    if GPU.simulator:  # the same NumPy operations: bitwise
        assert np.array_equal(got, cpu)


def test_time_sync_empty_plan():
    f = Forest.new(Brick(), 1)
    geom = PatchGeometry.from_forest(f, 4, 4, 2)
    plan = build_time_sync_plan(f, geom).to(GPU)
    assert len(plan) == 0
    q = dev(np.ones((f.n, 1) + geom.shape))
    apply_time_sync(plan, q, q, None, dev(np.zeros((f.n, 4, 1, 4))), None, 0.1, None, None,
                    backend=GPU)
    assert np.all(host(q) == 1.0)


def test_time_sync_conserves_mass_end_to_end():
    """Advection on a periodic two-level forest: ghost fill, boundaries and time sync on
    the GPU backend (the step kernel on the CPU, so that only the patch operations are
    under test); the totals stay constant to round-off and every step equals the CPU
    loop's."""
    from forestpy.solvers.clawpack.solver import ClawpackSolver

    from forestpy.vtable import get_riemann

    riemann = get_riemann("advection")
    solver = ClawpackSolver(riemann, order=2, transverse_waves=2, limiter="mc")
    f = small_forest(Brick(periodic_x=True, periodic_y=True), 4, base=1, nrefine=1)
    geom = PatchGeometry.from_forest(f, 4, 4, 2)
    ghosts, sync = build_ghost_plan(f, geom), build_time_sync_plan(f, geom)
    gghosts, gsync = ghosts.to(GPU), sync.to(GPU)
    assert len(sync) > 0
    x, y = geom.cell_centers()
    q = (1.5 + np.sin(2 * np.pi * x + 0.3) * np.cos(2 * np.pi * y + 1.1))[:, None]
    aux = np.zeros((geom.npatch, 0) + geom.shape)
    bc = normalize_bc("periodic", True, True)
    dt = 0.4 * geom.dx.min()

    def mass(a):
        return float(np.einsum("pji,p->", a[:, 0, 2:-2, 2:-2], geom.dx * geom.dy))

    def gpu_fluct(ixy, ql, qr, al, ar, params, out):
        res = np.empty(out.shape)
        solver.fluctuations(ixy, host(ql), host(qr), host(al), host(ar), params, res)
        out[...] = dev(res)

    m0 = mass(q)
    cq, gq = q.copy(), dev(q)
    for _ in range(2):
        fill_ghosts(ghosts, cq)
        apply_physical_bc(cq, geom, bc, riemann.wall_reflect)
        fill_ghosts(gghosts, gq, backend=GPU)
        apply_physical_bc(gq, geom, bc, riemann.wall_reflect, backend=GPU)
        assert_same(gq, cq)
        cq_new, _, edge = solver.step(cq, aux, geom, dt)
        gq_new = dev(cq_new)
        apply_time_sync(sync, cq, cq_new, aux, edge, geom, dt, solver.fluctuations,
                        solver.params)
        apply_time_sync(gsync, gq, gq_new, dev(aux), dev(edge), None, dt, gpu_fluct,
                        solver.params, backend=GPU)
        assert_same(gq_new, cq_new)
        cq, gq = cq_new, gq_new
    assert abs(mass(host(gq)) - m0) <= 1e-13 * abs(m0)


def test_fused_time_sync_launches_match_the_array_version():
    """The GPU time sync, one launch per piece (the step's fix; the subcycled step's fine
    sums, coarse sums and correction), against the array version on the CPU, on a forest
    with coarse patch corners that have fine neighbours across an x and a y face (their
    corner cells take both corrections, x first)."""
    from forestpy.solvers.clawpack.solver import ClawpackSolver

    from forestpy.cuda_device import kernel_launches
    from forestpy.patches.time_sync import (
        coarse_face_fluxes,
        corner_partners,
        correct_coarse,
        fine_face_terms,
    )
    from forestpy.vtable import get_riemann

    riemann = get_riemann("shallow_roe")
    cpu = ClawpackSolver(riemann)
    gpu = ClawpackSolver(riemann, backend=GPU).gpu_time_sync
    f = Forest.new(Brick(), 1).refine(np.array([False, True, True, False])).balance()
    geom = PatchGeometry.from_forest(f, 4, 4, 2)
    sync = build_time_sync_plan(f, geom)
    gsync = sync.to(GPU)
    partner, shared = (host(a) for a in corner_partners(gsync, GPU.xp))
    assert shared.sum() == (partner >= 0).sum() == 2  # two coarse patch corners
    rng = np.random.default_rng(5)
    q_old = rng.uniform(1.0, 2.0, (geom.npatch, 3) + geom.shape)
    q_mid = q_old + rng.uniform(-0.1, 0.1, q_old.shape)
    aux = np.zeros((geom.npatch, 0) + geom.shape)
    edge = rng.uniform(-1, 1, (geom.npatch, 4, 3, 4))
    q_new = rng.uniform(1.0, 2.0, q_old.shape)
    dt = 0.01

    want = q_new.copy()
    apply_time_sync(sync, q_old, want, aux, edge, None, dt, cpu.fluctuations, cpu.params)
    got = dev(q_new)
    launches = kernel_launches()
    gpu.apply(gsync, dev(q_old), got, dev(aux), dev(edge), dt, dev(cpu.params), -1)
    assert kernel_launches() - launches == 1
    assert_same_arithmetic(got, want)

    npairs = len(sync) // 2
    coarse_sum = dt * coarse_face_fluxes(sync, edge)
    fine_sum = np.zeros_like(coarse_sum)
    for k in range(2):
        fine_sum = fine_sum + 0.5 * dt * fine_face_terms(
            sync, q_old, q_mid if k else q_old, aux, edge, cpu.fluctuations, cpu.params)
    want = q_new.copy()
    correct_coarse(sync, want, aux, fine_sum, coarse_sum)
    gc, gf = dev(np.full((npairs, 3), np.nan)), dev(np.full((npairs, 3), np.nan))
    launches = kernel_launches()
    gpu.start_coarse_sums(gsync, dev(edge), dt, gc, gf)
    for k in range(2):
        gpu.add_fine_terms(gsync, dev(q_old), dev(q_mid if k else q_old), dev(aux), dev(edge),
                           0.5 * dt, dev(cpu.params), gf)
    got = dev(q_new)
    gpu.correct(gsync, got, dev(aux), gf, gc, -1)
    assert kernel_launches() - launches == 4
    assert_same_arithmetic(gc, coarse_sum)
    assert_same_arithmetic(gf, fine_sum)
    assert_same_arithmetic(got, want)


# --------------------------------------------------------------------------------------
# regrid transfer
# --------------------------------------------------------------------------------------


def filled(f, geom, q):
    q = q.copy()
    fill_ghosts(build_ghost_plan(f, geom), q)
    per = (geom.periodic_x, geom.periodic_y)
    bc = tuple("periodic" if per[s // 2] else "extrap" for s in range(4))
    apply_physical_bc(q, geom, normalize_bc(bc, *per), reflect=((), ()))
    return q


@pytest.mark.parametrize("brick", ["1x1", "per_xy"])
def test_transfer_refine_and_coarsen_match_cpu_bitwise(brick):
    rng = np.random.default_rng(7)
    f = small_forest(BRICKS[brick], 7, base=1, nrefine=2)
    gf = PatchGeometry.from_forest(f, 4, 6, 2)
    q = filled(f, gf, rng.standard_normal((f.n, 3) + gf.shape))
    # refine the coarse leaves, coarsen the fine families: all three cases (copy,
    # interpolate, average) in one transfer
    coarse = np.flatnonzero(f.level == f.level.min())
    g = f.refine(np.isin(np.arange(f.n), coarse[::2]))
    old_at = f.locate_global(*g.global_xy())
    g = g.coarsen((g.level == f.level.max()) & (f.level[old_at] == g.level)).balance()
    gg = PatchGeometry.from_forest(g, 4, 6, 2)
    old_at = f.locate_global(*g.global_xy())
    dlev = gg.level - gf.level[old_at]
    assert {-1, 0, 1} <= set(dlev.tolist()), dlev
    cpu = transfer(f, gf, q, g, gg)
    transfers = GPU.host_transfers
    gpu = transfer(f, gf, dev(q), g, gg, backend=GPU)
    assert GPU.host_transfers == transfers
    assert gpu.dtype == cpu.dtype
    assert_same(gpu, cpu)
    # and back
    qg = filled(g, gg, cpu)
    assert_same(transfer(g, gg, dev(qg), f, gf, backend=GPU), transfer(g, gg, qg, f, gf))


def test_transfer_keeps_dtype_and_raises_before_moving_data():
    f = small_forest(BRICKS["1x1"], 8)
    gf = PatchGeometry.from_forest(f, 4, 4, 2)
    q = filled(f, gf, np.random.default_rng(8).random((f.n, 1) + gf.shape)).astype(np.float32)
    g = f.refine(np.ones(f.n, dtype=bool))
    gg = PatchGeometry.from_forest(g, 4, 4, 2)
    out = transfer(f, gf, dev(q), g, gg, backend=GPU)
    assert out.dtype == np.float32
    h = g.refine(np.arange(g.n) == 0)  # two levels finer than f at one leaf
    with pytest.raises(ValueError, match="more than one level"):
        transfer(f, gf, dev(q), h, PatchGeometry.from_forest(h, 4, 4, 2), backend=GPU)
