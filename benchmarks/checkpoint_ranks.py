"""Per-rank checkpoints against the former gather to rank 0 (issue 36, item 4).

Launch with mpirun; rank 0 prints one JSON record (and appends it to --out)::

    mpirun -n 2 python benchmarks/checkpoint_ranks.py --mx 32 --level 5
    mpirun -n 4 python benchmarks/checkpoint_ranks.py --backend gpu --mx 64 --level 6

Problem: the uniform dam break of ``benchmarks/scaling.py`` (weak: ``--trees`` unit
trees per rank at ``--level``, ``--mx`` cells a side per patch), a few steps run first.
Timed, ``--repeats`` times each, median reported (seconds, the slowest rank):

* ``save_per_rank_s``: ``sim.save_checkpoint`` (each rank its file, rank 0 the index);
* ``save_gathered_s``: the former path, a ``Gatherv`` to rank 0 (``root_view(0)``) and
  one ``.npz`` written there (``write_checkpoint``);
* ``load_per_rank_s``: ``sim.load_checkpoint`` of the per-rank checkpoint on the same
  ranks (each rank reads the rank files holding its owned and halo patches).

Self-check: after the load, every rank's owned rows of ``q``, ``aux``, ``aux_setaux``
must equal those before the save bit for bit (``max_abs_diff``, 0 expected; the record
says ``bitwise``), and the restored run must take the same next step as the original
(``next_step_equal``).  ``gathers`` counts the whole-state gathers of the per-rank
save and load (0 expected).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--mx", type=int, default=32)
    ap.add_argument("--level", type=int, default=5)
    ap.add_argument("--trees", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default=None, help="folder for the checkpoints (a temporary "
                    "one by default)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)

    from mpi4py import MPI

    from forestpy.io.checkpoint import write_checkpoint

    comm = MPI.COMM_WORLD
    if a.backend == "gpu":
        from forestpy.parallel import select_device

        select_device(comm)
    from scaling import build

    a.mode = "weak"
    sim = build(a, comm, "weak")
    sim.run(max_steps=3)
    be = sim.backend
    folder = Path(a.dir) if a.dir else Path(comm.bcast(
        tempfile.mkdtemp(prefix="ck_ranks_") if comm.rank == 0 else None, 0))

    def slowest(fn):
        be.synchronize()
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        be.synchronize()
        mine = time.perf_counter() - t0
        return comm.allreduce(mine, op=MPI.MAX)

    def gathered():
        with sim.root_view(0) as root:
            if root is not None:
                write_checkpoint(root, folder / "gathered.npz")

    path = folder / "ck.npz"
    nown = sim.layout.nown
    before = [be.to_host(getattr(sim, k)[:nown]).copy() for k in ("q", "aux", "aux_setaux")]
    gathers0 = sim.exchange.gathers
    save = [slowest(lambda: sim.save_checkpoint(path)) for _ in range(a.repeats)]
    gathers = sim.exchange.gathers - gathers0
    old = []
    for _ in range(a.repeats):
        sim._root_copy = None  # gather each time (root_view keeps its copy otherwise)
        old.append(slowest(gathered))
    gathers1 = sim.exchange.gathers
    load = [slowest(lambda: sim.load_checkpoint(path)) for _ in range(a.repeats)]
    gathers += sim.exchange.gathers - gathers1
    after = [be.to_host(getattr(sim, k)[:sim.layout.nown]) for k in ("q", "aux", "aux_setaux")]
    diff = max(float(np.max(np.abs(x - y), initial=0.0)) if x.shape == y.shape else np.inf
               for x, y in zip(before, after))
    diff = comm.allreduce(diff, op=MPI.MAX)
    # the next step of the restored run against a second restore's (same data, same step)
    sim.run(max_steps=1)
    q1 = be.to_host(sim.q[:sim.layout.nown]).copy()
    sim.load_checkpoint(path)
    sim.run(max_steps=1)
    same = comm.allreduce(bool(np.array_equal(q1, be.to_host(sim.q[:sim.layout.nown]))),
                          op=MPI.LAND)
    nbytes = sum(f.stat().st_size for f in (folder / "ck.ranks").iterdir()) \
        if comm.rank == 0 else 0
    if comm.rank == 0:
        rec = {
            "benchmark": "checkpoint_ranks", "ranks": comm.size, "backend": a.backend,
            "mx": a.mx, "level": a.level, "trees_per_rank": a.trees,
            "patches": int(sim.forest.n), "rank_file_bytes": int(nbytes),
            "index_bytes": int(path.stat().st_size),
            "save_per_rank_s": float(np.median(save)), "save_per_rank_repeats": save,
            "save_gathered_s": float(np.median(old)), "save_gathered_repeats": old,
            "load_per_rank_s": float(np.median(load)), "load_per_rank_repeats": load,
            "gathers": int(gathers), "max_abs_diff": diff, "bitwise": diff == 0.0,
            "next_step_equal": bool(same), "host": os.uname().nodename,
        }
        print(json.dumps(rec), flush=True)
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps(rec) + "\n")
        if not a.dir:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
