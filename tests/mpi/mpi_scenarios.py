"""The distributed runs the MPI tests check, by name: ``ranks`` (the ``mpirun -n``),
``mode`` and the options of ``scripts/run_demo.py``; ``after`` names the scenario whose
checkpoint a restore reads, ``prepare(out, request)`` makes files a scenario needs (the
serial checkpoint, a demo file) and returns options to add."""

import importlib.util

from testsupport import ROOT, demo_file

# regrids every 4 steps: between them the ranks step on halo exchanges alone; one dt for
# all levels (AMR_SUBCYCLED: each level its own)
AMR = dict(mx=8, min_level=2, max_level=5, t_final=0.3, regrid_interval=4, subcycle=False)
UNIFORM = dict(mx=8, min_level=3, max_level=3, t_final=0.3)
# local time stepping: each level its own dt, regrids of the finer levels between the
# coarse steps (their old state migrates with them)
AMR_SUBCYCLED = dict(mx=8, min_level=2, max_level=5, t_final=0.3, regrid_interval=2,
                     subcycle=True)
PATCHES_1024 = dict(mx=8, min_level=5, max_level=5, t_final=0.02)
ONE_PATCH = dict(mx=8, min_level=0, max_level=0, t_final=0.2)
GAUGE_POINTS = [(0.0, 0.0), (0.5, 0.3), (-1.2, 0.7), (1.9, -1.9)]  # as in run_demo.py
HAVE_VTK = importlib.util.find_spec("vtk") is not None  # optional: then gauges alone

DEMO = ROOT / "demos" / "radial_dam.py"
# the command line: the radial dam, small (as tests/driver/test_cli.py's SMALL), levels 2-4
CLI_RUN = ["--set", "max_level=2", "--set", "min_level=2", "--set", "t_final=0.05",
           "--set", "mx=8", "--set", "max_level=4", "--quiet"]
CLI_REPORT = ["--set", "level=3", "--quiet"]
REPORTED_DEMO = """
    def qinit(x, y):
        h = 1.0 + 0.5 * np.exp(-20.0 * ((x - 0.2) ** 2 + y ** 2))
        return np.stack([h, np.zeros_like(x), np.zeros_like(x)])

    def report(sim, out):
        rank = getattr(sim, "rank", 0)
        (out / f"report_rank{rank}.txt").write_text("")
        return {"mass": sim.totals()["h"], "hmax": float(sim.q[:, 0, 2:-2, 2:-2].max()),
                "rows": int(sim.q.shape[0]), "patches": int(sim.forest.n),
                "built_distributed": bool(getattr(sim, "built_distributed", False))}
    """


def serial_checkpoint(out, request):
    """The radial dam (AMR) checkpointed after 6 steps by a serial run."""
    sim = request.getfixturevalue("radial_dam").setup(**AMR)
    sim.run(max_steps=6)
    sim.save_checkpoint(out / "serial_ck.npz")
    return {"checkpoint": str(out / "serial_ck.npz")}


def cli_run(out, request):
    return {"argv": ["run", str(DEMO), *CLI_RUN, "--out", str(out / "par")]}


# a few more steps, a per-rank checkpoint every 2 (the last two kept)
CLI_CHECKPOINTED = [*CLI_RUN, "--set", "t_final=0.3"]


def cli_checkpoint(out, request):
    return {"argv": ["run", str(DEMO), *CLI_CHECKPOINTED, "--checkpoint-interval", "2",
                     "--out", str(out / "par")]}


def cli_restart(out, request):
    """Restart from the oldest checkpoint that cli_checkpoint_2 kept (a per-rank one)."""
    kept = sorted((out.parent / "cli_checkpoint_2" / "par").glob("checkpoint_0*.npz"))
    return {"argv": ["run", str(DEMO), *CLI_CHECKPOINTED, "--restart", str(kept[0]),
                     "--out", str(out / "par")]}


def cli_report(out, request):
    demo = demo_file(out, REPORTED_DEMO, name="reported_mpi.py")
    return {"argv": ["run", str(demo), *CLI_REPORT, "--out", str(out / "par")]}


TWOROE = ROOT / "demos" / "tworoe" / "circular_dam.py"
# the two-layer dam break on the seed's smallest mesh, a few steps, one frame
TWOROE_RUN = ["--set", "cells=4016", "--set", "t_final=0.02", "--set", "frames=1",
              "--quiet"]


def tworoe_cli(out, request):
    return {"argv": ["run", str(TWOROE), *TWOROE_RUN, "--out", str(out / "par")]}


def scenario(ranks, mode="run", after=None, prepare=None, **opts):
    return dict(ranks=ranks, mode=mode, after=after, prepare=prepare, opts=opts)


SCENARIOS = {
    "uniform_overlap_3": scenario(3, overlap=True, whole_range_fraction=0.25, **UNIFORM),
    "uniform_overlap_whole_range_3": scenario(3, overlap=True, whole_range_fraction=1.0,
                                              **UNIFORM),
    "uniform_no_overlap_3": scenario(3, overlap=False, whole_range_fraction=0.25, **UNIFORM),
    "amr_2": scenario(2, **AMR),
    "amr_subcycled_3": scenario(3, **AMR_SUBCYCLED),
    "bowl_subcycled_2": scenario(2, demo="bowl", subcycle=True),
    "amr_3": scenario(3, **AMR),
    "bowl_2": scenario(2, demo="bowl"),
    "distributed_build_2": scenario(2, build="distributed", **AMR),
    "distributed_build_3": scenario(3, build="distributed", **AMR),
    "bowl_distributed_build_3": scenario(3, demo="bowl", build="distributed"),
    "bowl_sources_3": scenario(3, demo="bowl", sources=True, t_final=1.0),
    "record_2": scenario(2, record=True, **AMR),
    "first_rank_heavy_3": scenario(3, weights="first_rank_heavy", **AMR),
    "alternating_weights_2": scenario(2, weights="alternating", **AMR),
    "patches_1024_3": scenario(3, **PATCHES_1024),
    "one_patch_3": scenario(3, build="serial", **ONE_PATCH),
    "one_patch_distributed_3": scenario(3, build="distributed", **ONE_PATCH),
    "checkpoint_save_2": scenario(2, "save", max_steps=6, **AMR),
    "checkpoint_restore_3": scenario(3, "restore", after="checkpoint_save_2", **AMR),
    "checkpoint_restore_2": scenario(2, "restore", after="checkpoint_save_2", **AMR),
    "checkpoint_save_lossless_3": scenario(3, "save", max_steps=6, checkpoint_codec="lossless",
                                           **AMR),
    "serial_checkpoint_restore_2": scenario(2, "restore", prepare=serial_checkpoint, **AMR),
    "vtk_gauges_3": scenario(3, vtk=HAVE_VTK, gauges=True, build="serial", **AMR),
    "vtk_gauges_distributed_3": scenario(3, vtk=HAVE_VTK, gauges=True, build="distributed",
                                         **AMR),
    "gauges_checkpoint_every_3": scenario(3, gauges=True, checkpoint_every=3, **AMR),
    "cli_run_2": scenario(2, "cli", prepare=cli_run),
    "cli_report_3": scenario(3, "cli", prepare=cli_report),
    "cli_checkpoint_2": scenario(2, "cli", prepare=cli_checkpoint),
    "cli_restart_3": scenario(3, "cli", after="cli_checkpoint_2", prepare=cli_restart),
    "tworoe_cli_2": scenario(2, "cli", prepare=tworoe_cli),
    # the GPU backend (in Numba's CUDA simulator unless NUMBA_ENABLE_CUDASIM=0)
    "gpu_level_1_2": scenario(2, mx=8, min_level=1, max_level=1, t_final=0.1, backend="gpu"),
    "gpu_level_2_2": scenario(2, mx=4, min_level=2, max_level=2, t_final=0.5, backend="gpu",
                              gauges=True),
    "gpu_amr_2": scenario(2, backend="gpu", **AMR),
    # GeoClaw on 3 ranks, the first two owning no patch (so no gauge, no fgmax point)
    # through every regrid and repartition, gauges and fgmax: tiny (the simulator)
    "gpu_bowl_empty_ranks_3": scenario(3, demo="bowl", backend="gpu", mx=4, min_level=1,
                                       max_level=2, t_final=0.6, regrid_interval=2,
                                       weights="first_rank_heavy", gauges=True,
                                       fgmax=True),
    "gpu_bowl_2": scenario(2, demo="bowl", backend="gpu"),
    # issue 36's crash: GeoClaw's positivity fix over the ranks on the GPU backend (the
    # CUDA simulator with CuPy's rules), a deficit taken from other ranks, a rank owning
    # no patch (or one dry patch)
    "gpu_positivity_3": scenario(3, "call", call="gpu_rules:positivity"),
    "gpu_positivity_dry_3": scenario(3, "call", call="gpu_rules:positivity", dry=True),
    # the wavelet criterion normalises by the domain's largest depth (a reduction)
    "wavelet_amr_2": scenario(2, demo="wavelet_tagging", eps=3e-3, **AMR),
    # ... and discriminates: the largest depth on one rank, a low step on the other
    # (scripts/wavelet_hump.py); with each rank's own maximum (local_norm) the forests
    # differ from the serial run's
    "wavelet_hump_2": scenario(2, demo="wavelet_hump", t_final=0.1),
    "wavelet_hump_local_norm_2": scenario(2, demo="wavelet_hump", local_norm=True,
                                          t_final=0.1),
    # fgmax on a wet/dry case with regrids and repartitions: the points change ranks
    "bowl_fgmax_3": scenario(3, demo="bowl", fgmax=True),
}
