"""Launched by tests/mpi/conftest.py: ``mpirun -n N python run_demo.py --batch JOBS``
runs every scenario of the JSON list ``JOBS`` in this one MPI job, one after the other
(Numba compiles once per rank, not once per scenario); ``mpirun -n N python run_demo.py
OUT MODE [JSON]`` runs one, as a script of its own.

A scenario builds ``demos/radial_dam.py``'s setup with the options in JSON, distributes
it over the ranks and writes rank 0's gathered result to ``OUT/result.npz``.  MODE:

* ``run``     -- run to t_final.
* ``save``    -- run max_steps steps, write the checkpoint ``OUT/ck.npz`` (through the
  codec ``"checkpoint_codec"`` when given).
* ``restore`` -- read the checkpoint (``"checkpoint"`` in JSON, else ``OUT/ck.npz``)
  and run to t_final.
* ``cli``     -- ``forestpy.cli.main(JSON["argv"])`` on every rank (the command line
  under mpirun); writes each rank's exit code and what it printed to ``OUT/cli.json``.
* ``call``    -- ``function(OUT, JSON)`` on every rank, ``JSON["call"]`` naming it as
  ``module:function`` (a module of this folder); it writes ``OUT/result.npz``.

With ``"record": true`` a callback samples the depth along a line after every step;
``"overlap": false`` turns off the communication overlap (``"whole_range_fraction"``
sets that attribute); ``"sources": true`` adds the discharge sources of
``bowl.sources()``; ``"vtk": true`` writes VTK frames into ``OUT/vtk``;
``"backend": "gpu"`` in the CUDA simulator follows CuPy's rules (``cupy_rules``);
``"gauges": true`` records gauges into ``OUT/gauges.csv``; ``"checkpoint_every": N``
writes checkpoints every N steps into ``OUT/every`` (CheckpointEvery); ``"build": "distributed"``
builds with ``distributed_setup`` (the initial refinement distributed; the cells that
the radial dam's ``qinit`` evaluates on each rank are counted).

Per rank it also records the peak of the memory traced (``tracemalloc``: NumPy's
allocations included) while ``summary()`` runs (the totals) and, in ``save`` mode,
while the checkpoint is written, against the size of the global state array; with
``record`` whether a rank ever held the global state after a step's callbacks.

In a batch, rank 0 writes ``OUT/started`` before a scenario and ``OUT/done`` after it;
an exception on any rank writes its traceback to ``OUT/error_rank<r>.txt`` and aborts
the job (the other ranks may be waiting in a collective): the launcher then knows which
scenario failed and starts the rest again.
"""

import contextlib
import gc
import importlib
import io
import json
import os
import pathlib
import sys
import time
import traceback
import tracemalloc

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # tests/: testsupport
sys.path.insert(0, str(HERE))  # bowl, recorder
import bowl  # noqa: E402
from recorder import Recorder  # noqa: E402
from testsupport import load_demo  # noqa: E402

import forestpy.io.checkpoint  # noqa: E402, F401 - imported before memory is traced
from forestpy.parallel import distribute, distributed_setup  # noqa: E402

GAUGES = [(0.0, 0.0), (0.5, 0.3), (-1.2, 0.7), (1.9, -1.9)]
_DEMOS = {}


def demo_module(name):
    """The demo module (loaded once per process, so that its kernels compile once)."""
    if name == "bowl":
        return bowl
    if name not in _DEMOS:  # a case of this folder, else a demo of demos/
        _DEMOS[name] = importlib.import_module(name) if (HERE / f"{name}.py").exists() \
            else load_demo(name)
    return _DEMOS[name]


class GlobalProbe:
    """Collective callback (runs on every rank, after the rank-0 ones): whether this
    rank held the global state after any step's callbacks."""

    collective = True

    def __init__(self):
        self.held = 0

    def on_step(self, sim):
        self.held = max(self.held, int(sim._full))


def traced_peak(fn):
    """(fn(), the peak of the memory traced while it runs)."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def run_cli(out, argv):
    """``forestpy.cli.main(argv)`` on every rank; rank 0 writes the exit codes and the
    standard output of every rank."""
    from mpi4py import MPI

    from forestpy.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv)
    comm = MPI.COMM_WORLD
    ranks = comm.gather({"rc": rc, "stdout": buf.getvalue()}, root=0)
    if comm.rank == 0:
        (out / "cli.json").write_text(json.dumps(ranks))


def run(out, mode, opts):
    """One scenario (see the module's docstring); rank 0 writes ``out/result.npz``."""
    opts = dict(opts)
    if mode == "cli":
        return run_cli(out, opts["argv"])
    if mode == "call":
        module, function = opts["call"].split(":")
        return getattr(importlib.import_module(module), function)(out, opts)
    checkpoint = pathlib.Path(opts.pop("checkpoint", out / "ck.npz"))
    if opts.get("backend") == "gpu" and os.environ.get("NUMBA_ENABLE_CUDASIM") == "0":
        from forestpy.parallel import select_device

        select_device()  # one GPU per rank, before any other CUDA call
    elif opts.get("backend") == "gpu":  # the CUDA simulator: NumPy with CuPy's rules
        import cupy_rules

        cupy_rules.install()
    max_steps = opts.pop("max_steps", None)
    codec = opts.pop("checkpoint_codec", None)
    weights = opts.pop("weights", None)
    record = opts.pop("record", False)
    overlap = opts.pop("overlap", True)
    vtk = opts.pop("vtk", False)
    opts_whole = opts.pop("whole_range_fraction", 0.25)
    gauges = opts.pop("gauges", False)
    opts_fgmax = opts.pop("fgmax", False)
    checkpoint_every = opts.pop("checkpoint_every", None)
    recorder = Recorder()
    probe = GlobalProbe()
    demo = opts.pop("demo", "radial_dam")
    if opts.pop("sources", False):  # bowl: discharge sources (bowl.SOURCES)
        opts["sources"] = bowl.sources()
    module = demo_module(demo)
    qinit_cells = [0]
    if opts.pop("build", None) == "distributed":
        qinit = getattr(module, "qinit", None)
        if qinit is not None:
            def counting_qinit(x, y):
                qinit_cells[0] += x.size
                return qinit(x, y)

            module.qinit = counting_qinit
        try:
            sim = distributed_setup(module.setup, overlap=overlap, **opts)
        finally:
            if qinit is not None:
                module.qinit = qinit
    else:
        sim = module.setup(**opts)
    built_distributed = int(getattr(sim, "built_distributed", False))
    if record:
        sim.callbacks = [recorder]
    if gauges:  # sampled on the owning ranks, written by rank 0 (ParallelGauges)
        from forestpy.callbacks import Gauges

        sim.callbacks.append(Gauges(GAUGES, path=out / "gauges.csv"))
    if vtk:  # frames written per rank (ParallelVTKOutput), rank 0 writes the index
        from forestpy.io.vtk import VTKOutput

        sim.callbacks.append(VTKOutput(out / "vtk", interval=0.1))
        # bit-rounded frames: the ranges behind the relative bound are global
        sim.callbacks.append(VTKOutput(out / "vtk", name="rounded", interval=0.1,
                                       tolerance=1e-3, compression="lz4"))
    fgmax = None
    if opts_fgmax:  # maxima folded where the points lie, merged at the end (no gather)
        from forestpy.extensions.geoclaw.fgmax import FGMax

        fgmax = FGMax.grid(-90.0, 90.0, -90.0, 90.0, 31, 29)
        sim.callbacks.append(fgmax)
    if checkpoint_every:  # last: the checkpoints hold the gauges' samples of their step
        from forestpy.callbacks import CheckpointEvery

        sim.callbacks.append(CheckpointEvery(out / "every", checkpoint_every, keep=100))
    sim = distribute(sim, overlap=overlap)
    if record:
        sim.callbacks.append(probe)  # appended after distribute: runs as it is, on every rank
    sim.whole_range_fraction = opts_whole
    if weights == "first_rank_heavy":  # uneven partition: rank 0 gets almost nothing
        sim.partition_weights = lambda forest: np.where(np.arange(forest.n) == 0, 1e6, 1.0)
        sim._partition()
    elif weights == "alternating":  # each regrid moves half of the first half to the other rank
        def alternating(forest):
            heavy = np.arange(forest.n) < forest.n // 2
            return np.where(heavy == (sim.regrids % 2 == 1), 1e3, 1.0)

        sim.partition_weights = alternating
        sim._partition()
    if mode == "restore":
        sim.load_checkpoint(checkpoint)
    sim.run(max_steps=max_steps if mode == "save" else None)
    save_peak = 0
    if mode == "save":
        _, save_peak = traced_peak(lambda: sim.save_checkpoint(checkpoint, codec=codec))
    gathers = sim.exchange.gathers  # before the gather to rank 0 below
    # patch rows each rank holds (q, aux), against its owned + halo patches
    layout = sim.comm.allgather((sim.q.shape[0], sim.aux.shape[0], sim.aux_setaux.shape[0],
                                 sim.layout.nown, len(sim.layout.halo), int(sim._full)))
    owned = sim.comm.allgather(sim.layout.nown)
    # whether the early/late split was made (on first use: by an overlapped step only)
    split_made = sim.comm.allgather("_split_of" not in vars(sim.layout))
    split = sim.comm.allgather((sim.layout.early.n, sim.layout.late.n))
    # cells per patch moved by the halo exchange (-1: whole patches), cells of a padded patch
    cells = sim.layout.q_exchange.cells
    strips = sim.comm.allgather((-1 if cells is None else len(cells),
                                 int(np.prod(sim.q.shape[2:]))))
    summary, summary_peak = traced_peak(sim.summary)  # the totals: collective
    totals = summary["totals_final"]
    # (totals gathered, bytes traced during summary(), during save_checkpoint(), global q
    #  bytes, held the global state after a step's callbacks, q rows after summary())
    global_bytes = sim.forest.n * int(np.prod(sim.q.shape[1:])) * sim.q.dtype.itemsize
    memory = sim.comm.allgather((sim.exchange.gathers - gathers, summary_peak, save_peak,
                                 global_bytes, probe.held, sim.q.shape[0]))
    build = sim.comm.allgather((built_distributed, qinit_cells[0]))
    centres_made = sim.comm.allgather(sim._centers_host is not None)  # made on first use only
    with sim.root_view(0) as root:  # the final state on rank 0 only
        if root is not None:
            np.savez(out / "result.npz", q=sim.backend.to_host(root.q), t=sim.t,
                     steps=sim.steps, regrids=sim.regrids, owned=np.array(owned),
                     split=np.array(split), split_made=np.array(split_made), gathers=gathers,
                     migrated=sim.exchange.migrated,
                     layout=np.array(layout), totals=np.array(list(totals.values())),
                     level=sim.forest.level, record=np.array(recorder.rows),
                     memory=np.array(memory),
                     totals_initial=np.array(list(sim.totals_initial.values())),
                     build=np.array(build), strips=np.array(strips),
                     centres_made=np.array(centres_made))
            if fgmax is not None:
                res = fgmax.results()
                np.savez(out / "fgmax.npz", **{k: res[k] for k in (
                    "max_depth", "max_speed", "max_surface", "arrival_time", "bed")})


def batch(jobs_file):
    """Every job of the list in ``jobs_file`` ({"out", "mode", "opts"}), in order."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    for job in json.loads(pathlib.Path(jobs_file).read_text()):
        out = pathlib.Path(job["out"])
        if comm.rank == 0:
            out.mkdir(parents=True, exist_ok=True)
            (out / "started").write_text(str(time.time()))
        comm.Barrier()
        try:
            run(out, job["mode"], job["opts"])
        except BaseException:
            (out / f"error_rank{comm.rank}.txt").write_text(traceback.format_exc())
            sys.stdout.flush()
            sys.stderr.flush()
            comm.Abort(1)
        gc.collect()
        comm.Barrier()
        if comm.rank == 0:
            (out / "done").write_text(str(time.time()))


if __name__ == "__main__":
    if sys.argv[1] == "--batch":
        batch(sys.argv[2])
    else:
        run(pathlib.Path(sys.argv[1]), sys.argv[2],
            json.loads(sys.argv[3]) if len(sys.argv) > 3 else {})
