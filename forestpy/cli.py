"""The ``forestpy`` command line.

``forestpy run DEMO.py [--set KEY=VALUE ...] [--backend cpu|gpu] [--out DIR] [--quiet]
[--checkpoint-interval N [--checkpoint-keep K] [--checkpoint-codec SPEC]] [--restart FILE]``
    Load a demo script (a module-level ``OPTIONS`` dict of defaults and
    ``setup(**overrides) -> Simulation``), override options, run it with progress on
    stderr, print the timer breakdown, and write ``options_used.json`` (before the run)
    and ``summary.json`` (after it, also when it fails) into the output folder.
    ``--checkpoint-interval N`` writes ``DIR/checkpoint_<step>.npz`` every N steps (the
    last two kept, or K with ``--checkpoint-keep K``, and ``DIR/checkpoint_latest.npz``)
    and at the end (``--checkpoint-codec lossless|dwt53:rtol=R|...`` compresses their patch
    data, :mod:`forestpy.io.codecs`); ``--restart FILE`` builds the simulation with the
    same demo and ``--set`` options, loads the checkpoint and continues to ``t_final``.  An
    unreadable or unfitting checkpoint is a usage error (exit code 2) and writes nothing.

    ``--vtk amr|flat`` with ``--output-interval DT``, ``--output-times T1,T2`` or
    ``--output-steps N`` writes ParaView frames and ``DIR/frame.pvd`` (the steps land
    on output times); ``--frame-tolerance TOL`` (relative to each field's range, or
    ``name=T,...`` absolute) rounds their values to the bits the bound needs and
    ``--frame-compression zlib|lz4|lzma|none[:LEVEL]`` picks VTK's compressor (zlib by
    default): the frames stay plain VTK files (docs/compression.md);
    ``--help-options`` lists the demo's typed options and exits.

    A demo may also define ``report(sim, out) -> dict`` (validation against data,
    written after the run: the dict is printed as JSON and stored in
    ``DIR/report.json`` and in the summary).  A demo that is not a Simulation (HWFV1,
    Boussinesq) defines ``main(out, **overrides) -> dict`` instead of using ``setup``'s
    result: it is called with the output folder and its dict becomes ``report.json``.
    Under ``mpirun``/``srun`` (more than one MPI rank) the Simulation is distributed
    over the ranks (``forestpy.parallel.distribute``; with ``--backend gpu`` each rank
    first selects its own GPU) and rank 0 alone writes the summary files (the final
    totals are a reduction over the ranks; ``report`` runs on rank 0 on the state
    gathered to rank 0 only).

``forestpy run --config RUN.toml [--out DIR] ...``
    A GeoClaw-like run from a configuration file instead of a demo script (topography
    and dtopo files, gauges, fgmax, regions, output times; the file's ``[run] kind``
    names the loader, :func:`forestpy.vtable.get_config_kind`; see docs/tutorial.md).

Before Numba compiles anything, ``run`` says so on stderr; the compilation time is
reported apart (timer table, last line, ``compile_s`` in the summary) and left out of
the cell-update rates.  Bad input is one line on stderr and exit code 2, nothing
written: unknown or out-of-range options, an output folder that cannot be written, a
restart with other ``--set`` values (unless ``--allow-changed-options``).  Restarting
from the checkpoint of a finished run says so and exits 0.

``forestpy plot OUT_DIR [--field F] [--frame K|last|all] [--contour V,...] [--movie M]``
    Render frames to PNG (beside the frames, or ``--png FILE``), or every frame into
    an animated GIF/MP4, offscreen with pyvista; ``--gauges [FILE]`` the gauges' time
    series, ``--fgmax [FILE]`` an fgmax map.

``forestpy list``
    List the registered Riemann solvers.

Exit codes: 0 success, 1 the simulation (setup or run) failed, 2 usage errors such as
an unknown option name, 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import inspect
import io
import json
import os
import re
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Mapping
from pathlib import Path

__all__ = ["main", "load_demo", "parse_sets"]

PROG = "forestpy"


class CLIError(Exception):
    """A usage error: one message on stderr, exit code ``code``, no traceback."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


def _version() -> str:
    try:
        from forestpy.version import __version__

        return __version__
    except Exception:  # noqa: BLE001 - a version string must never break a run
        return "unknown"


# --------------------------------------------------------------------------- demos
def load_demo(path) -> object:
    """Import the demo script at ``path`` under a unique module name and check that it
    defines ``OPTIONS`` (a mapping) and ``setup`` (a callable)."""
    path = Path(path)
    if not path.is_file():
        raise CLIError(f"demo file not found: {path}")
    stem = re.sub(r"\W", "_", path.stem)
    name = f"_forestpy_demo_{stem}_{uuid.uuid4().hex[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CLIError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)  # let a demo import helpers that sit beside it
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(name, None)
        raise CLIError(f"importing demo {path} failed: {type(e).__name__}: {e}", code=1) from e
    finally:
        try:
            sys.path.remove(folder)
        except ValueError:
            pass
    missing = [
        what
        for what, ok in (
            ("OPTIONS (a dict of option defaults)", isinstance(getattr(module, "OPTIONS", None),
                                                              Mapping)),
            ("setup(**overrides) -> Simulation or main(out, **overrides) -> dict",
             callable(getattr(module, "setup", None)) or is_standalone(module)),
        )
        if not ok
    ]
    if missing:
        raise CLIError(f"{path} is not a forestpy demo: it must define {' and '.join(missing)}")
    return module


def load_config(path) -> object:
    """The demo-like object of a run configuration file (``forestpy run --config``):
    the file's ``[run] kind`` (default ``"geoclaw"``) names the loader registered with
    :func:`forestpy.vtable.register_config_kind`; any problem is a :class:`CLIError`."""
    from forestpy.vtable import get_config_kind

    path = Path(path)
    if not path.is_file():
        raise CLIError(f"--config {path}: no such file")
    try:
        import tomllib  # Python 3.11+
    except ImportError:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            raise CLIError("--config needs Python 3.11 (tomllib) or pip install tomli") \
                from None
    try:
        with open(path, "rb") as f:
            run = tomllib.load(f).get("run", {})
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as e:
        raise CLIError(f"--config {path}: not a valid TOML file ({e})") from None
    kind = run.get("kind", "geoclaw") if isinstance(run, dict) else "geoclaw"
    try:
        return get_config_kind(str(kind))(path)
    except KeyError as e:
        raise CLIError(f"--config {path}: {e.args[0]}") from None
    except ValueError as e:  # the loader's check of the file
        raise CLIError(f"--config {path}: {e}") from None


def _config_output(module, args) -> None:
    """The ``[output]`` table of a configuration, where the command line sets nothing."""
    out = getattr(module, "output", None) or {}
    if args.vtk is None and out.get("vtk"):
        args.vtk = out["vtk"]
    if args.output_interval is None and args.output_times is None and \
            args.output_steps is None:
        args.output_interval = out.get("interval")
        if out.get("times") is not None:
            args.output_times = ",".join(map(repr, out["times"]))
        args.output_steps = out.get("steps")


def is_standalone(module) -> bool:
    """A demo that runs itself (not a Simulation): it defines ``main`` with an ``out``
    parameter."""
    main = getattr(module, "main", None)
    if not callable(main):
        return False
    try:
        return "out" in inspect.signature(main).parameters
    except (TypeError, ValueError):
        return False


def mpi_world_size() -> int:
    """Ranks of the launch (mpirun/mpiexec of MPICH or Open MPI, srun), from the
    environment, so that a serial run never imports mpi4py."""
    for key in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", "PMIX_SIZE"):
        value = os.environ.get(key)
        if value and value.isdigit() and key != "SLURM_NTASKS":
            return int(value)
    # srun sets SLURM_NTASKS for every job step; only count it inside a task
    if os.environ.get("SLURM_PROCID") is not None and os.environ.get("SLURM_NTASKS", "").isdigit():
        return int(os.environ["SLURM_NTASKS"])
    return 1


def parse_sets(items, defaults: Mapping, where: str = "the demo") -> dict:
    """Turn ``["key=value", ...]`` into typed overrides (type of each default, see
    :func:`forestpy.options.parse_value`); unknown keys and malformed items raise
    :class:`CLIError` (exit code 2)."""
    from forestpy.options import OptionError, option_defaults, parse_value

    plain = option_defaults(defaults)
    overrides: dict = {}
    valid = ", ".join(sorted(map(str, defaults)))
    for item in items or ():
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CLIError(
                f"--set expects KEY=VALUE, got {item!r}; valid keys for {where}: {valid}"
            )
        if key not in defaults:
            raise CLIError(f"unknown option {key!r} for {where}; valid keys: {valid}")
        try:
            overrides[key] = parse_value(text, defaults[key], key)
        except OptionError as e:
            raise CLIError(f"--set {key}={text}: {e}") from e
        except (ValueError, TypeError) as e:
            raise CLIError(
                f"--set {key}={text}: {e} (the default is {plain[key]!r})"
            ) from e
    return overrides


def writable_folder(folder: Path, flag: str) -> Path:
    """Create ``folder`` if needed and check that a file can be written in it; else a
    :class:`CLIError` (one line, exit code 2) before anything is computed."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise CLIError(f"{flag} {folder}: cannot write in this folder ({reason})") from None
    return folder


# --------------------------------------------------------------------------- run
def _summary_line(sim, summary: dict | None = None, setup_compile_s: float = 0.0) -> str:
    # pass the summary already made: with MPI, summary() is collective (the totals)
    summary = sim.summary() if summary is None else summary
    cups = summary["cell_updates_per_s"] or float("nan")  # startup, compilation excluded
    levels = "  ".join(f"L{k}:{v}" for k, v in sorted(sim.patches_per_level().items()))
    compiled = float(summary.get("compile_s") or 0.0) + setup_compile_s
    compiling = (f"; compiling kernels took {compiled:.1f} s (first run only, cached "
                 "for later runs)") if compiled >= 0.05 else ""
    return (
        f"{sim.steps} steps ({sim.rejected_steps} rejected, {sim.regrids} regrids) to "
        f"t={sim.t:.6g} in {sim.wall_s:.3f} s, {cups:.3g} cell updates/s (startup and "
        f"compilation excluded), patches per level: {levels}{compiling}"
    )


def _failure_summary(sim, base: dict, error: BaseException, phase: str, wall: float) -> dict:
    summary: dict = {}
    if sim is not None:
        try:
            summary = sim.summary()
            # Simulation.run adds to wall_s only when it returns: use the measured time.
            summary["wall_s"] = wall
            summary["cell_updates_per_s"] = sim.cell_updates / wall if wall > 0 else None
        except Exception as e:  # noqa: BLE001 - the summary of a broken run is best effort
            summary = {"summary_error": f"{type(e).__name__}: {e}"}
    return {
        **base,
        **summary,
        "status": "interrupted" if isinstance(error, KeyboardInterrupt) else "failed",
        "failed_in": phase,
        "error": f"{type(error).__name__}: {error}",
        "error_type": type(error).__name__,
    }


def cmd_run(args, argv: list[str]) -> int:
    from forestpy.callbacks import CheckpointEvery, Progress
    from forestpy.errors import InputFileError
    from forestpy.io.checkpoint import CheckpointError, read_checkpoint
    from forestpy.io.summary import to_jsonable, write_json_atomic
    from forestpy.jit import CompileWatch
    from forestpy.options import OptionError, check_relations, describe_options, option_defaults

    if args.config is not None:
        if args.demo is not None:
            raise CLIError(f"give a demo script or --config FILE, not both ({args.demo}, "
                           f"{args.config})")
        demo_path = Path(args.config)
        if args.set:
            raise CLIError(f"--set: a run from --config takes its values from the file; "
                           f"edit {demo_path} instead")
        module = load_config(demo_path)
        demo_name = str(getattr(module, "name", None) or demo_path.stem)
        _config_output(module, args)
    elif args.demo is None:
        raise CLIError("give a demo script (forestpy run DEMO.py) or --config FILE")
    else:
        demo_path = Path(args.demo)
        module = load_demo(demo_path)
        demo_name = demo_path.stem
    if args.help_options:
        if args.config is not None:
            print(f"a run from --config takes no --set options: its values are the tables "
                  f"of {args.config} (see docs/tutorial.md)")
            return 0
        print(describe_options(module.OPTIONS, f"options of demo {demo_name!r} "
                               f"(forestpy run {args.demo} --set NAME=VALUE):"))
        return 0
    defaults = dict(module.OPTIONS)
    overrides = parse_sets(args.set, defaults, f"demo {demo_name!r}")
    if args.backend is not None:
        if "backend" not in defaults:
            raise CLIError(
                f"--backend: demo {demo_name!r} has no 'backend' option; valid keys: "
                f"{', '.join(sorted(map(str, defaults)))}"
            )
        if "backend" in overrides and overrides["backend"] != args.backend:
            raise CLIError(
                f"--backend {args.backend} contradicts --set backend={overrides['backend']}"
            )
        overrides["backend"] = args.backend
    in_effect = {**option_defaults(defaults), **overrides}
    try:
        check_relations(defaults, in_effect)
    except OptionError as e:
        raise CLIError(f"--set: {e}") from e
    vtk_kind = args.vtk
    output_times = None
    if args.output_times is not None:
        output_times = _parse_floats(args.output_times, "--output-times")
    if args.output_interval is not None and not args.output_interval > 0:
        raise CLIError(f"--output-interval must be > 0, got {args.output_interval}")
    if args.output_steps is not None and args.output_steps < 1:
        raise CLIError(f"--output-steps must be >= 1, got {args.output_steps}")
    if vtk_kind is None and (output_times is not None or args.output_interval is not None
                             or args.output_steps is not None):
        vtk_kind = "amr"
    frame_tolerance = frame_compression = None
    if args.frame_tolerance is not None:
        from forestpy.io.bitround import parse_tolerance

        try:
            frame_tolerance = parse_tolerance(args.frame_tolerance)
        except ValueError as e:
            raise CLIError(f"--frame-tolerance: {e}") from None
    if args.frame_compression is not None:
        from forestpy.io.vtk import parse_compression

        try:
            frame_compression = parse_compression(args.frame_compression)
        except ValueError as e:
            raise CLIError(f"--frame-compression: {e}") from None
    if vtk_kind is None and (frame_tolerance is not None or frame_compression is not None):
        raise CLIError("--frame-tolerance and --frame-compression apply to frames: give "
                       "--vtk or an output schedule (--output-interval, ...) too")
    if args.checkpoint_interval is not None and args.checkpoint_interval < 1:
        raise CLIError(f"--checkpoint-interval must be >= 1, got {args.checkpoint_interval}")
    if args.checkpoint_keep < 1:
        raise CLIError(f"--checkpoint-keep must be >= 1, got {args.checkpoint_keep}")
    if args.checkpoint_codec is not None:
        from forestpy.io.codecs import CodecError, get_codec

        try:
            get_codec(args.checkpoint_codec)
        except CodecError as e:
            raise CLIError(f"--checkpoint-codec: {e}") from None
    checkpoint = None
    if args.restart is not None:  # read it before anything is written
        try:
            # a per-rank checkpoint: its index; restore() reads this rank's rows
            checkpoint = read_checkpoint(args.restart, patches=False)
        except CheckpointError as e:
            raise CLIError(f"--restart: {e}") from e
        extra = checkpoint.get("extra") or {}
        if isinstance(extra, Mapping) and "overrides" in extra:
            if extra["overrides"] != to_jsonable(overrides):
                changed = _changed_sets(extra["overrides"], to_jsonable(overrides))
                if not args.allow_changed_options:
                    raise CLIError(
                        f"--restart: the checkpoint was written with other --set options "
                        f"({changed}); give the same ones, or --allow-changed-options to "
                        "continue with these")
                print(f"{PROG} run: warning: continuing with changed options ({changed})",
                      file=sys.stderr)

    nranks, rank = mpi_world_size(), 0
    if nranks > 1:
        from mpi4py import MPI

        rank = MPI.COMM_WORLD.rank
    write_json = write_json_atomic if rank == 0 else _no_write  # rank 0 writes the files

    out = Path(args.out) if args.out is not None else Path("out") / demo_name
    made = [p for p in (out, *out.parents) if not p.exists()]  # removed on a usage error
    writable_folder(out, "--out")

    def usage_error(e: Exception, prefix: str | None = None) -> CLIError:
        """A bad option value or input file found by setup (or a checkpoint that does not
        fit): one line, exit code 2, and nothing written (the folders this run made,
        still empty, are removed)."""
        for folder in made:
            with contextlib.suppress(OSError):
                folder.rmdir()
        return CLIError(f"{type(e).__name__}: {e}" if prefix is None else f"{prefix}{e}")
    base = {
        "demo": demo_name,
        "demo_file": str(demo_path),
        "command": [PROG, *argv],
        "forestpy_version": _version(),
    }
    if checkpoint is not None:
        base["restart"] = {
            "file": str(args.restart), "t": checkpoint["t"], "steps": checkpoint["steps"]
        }

    def fail(sim, error, phase, wall) -> int:
        write_json(out / "summary.json", _failure_summary(sim, base, error, phase, wall))
        if args.traceback:
            traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
        what = "interrupted" if isinstance(error, KeyboardInterrupt) else "failed"
        print(
            f"{PROG} run: {demo_name} {what} during {phase}: {type(error).__name__}: {error}\n"
            f"{PROG} run: summary written to {out / 'summary.json'}",
            file=sys.stderr,
        )
        return 130 if isinstance(error, KeyboardInterrupt) else 1

    def options_used(sim) -> dict:
        return {
            **base,
            "overrides": overrides,
            "demo_options": in_effect,
            "simulation_options": None if sim is None else sim.options,
        }

    if nranks > 1 and in_effect.get("backend") == "gpu":
        from forestpy.parallel import select_device

        select_device()

    if is_standalone(module):
        return _run_standalone(module, args, out, base, overrides, in_effect, fail,
                               usage_error, vtk_kind, output_times, rank)

    t0 = time.perf_counter()
    build = contextlib.nullcontext()
    if nranks > 1:  # the initial refinement distributed: no rank holds the whole state
        from forestpy.parallel import build_distributed

        build = build_distributed()
    watch = CompileWatch(sys.stderr if rank == 0 else None, label=f"demo {demo_name}")
    try:
        with build, watch:
            sim = module.setup(**overrides)
        for attr in ("run", "summary", "timers", "callbacks", "options"):
            if not hasattr(sim, attr):
                raise TypeError(
                    f"setup() returned {type(sim).__name__}, not a Simulation (no {attr!r})"
                )
    except (OptionError, InputFileError) as e:
        raise usage_error(e) from e
    except (Exception, KeyboardInterrupt) as e:
        write_json(out / "options_used.json", options_used(None))
        return fail(None, e, "setup", time.perf_counter() - t0)

    if checkpoint is not None:
        try:
            sim.restore(checkpoint)
        except CheckpointError as e:
            raise usage_error(e, "--restart: ") from e
        if sim.t >= sim.t_final - 1e-12 * max(1.0, abs(sim.t_final)):
            print(f"{PROG} run: {args.restart} is at t={sim.t:.6g}, the end of the run "
                  f"(t_final={sim.t_final:.6g}): nothing to do; --set t_final=... (with "
                  "--allow-changed-options) runs on", file=sys.stderr)
            return 0
        print(
            f"{PROG} run: restarting from {args.restart} at t={sim.t:.6g}, step {sim.steps}",
            file=sys.stderr,
        )
    write_json(out / "options_used.json", options_used(sim))
    if vtk_kind is not None:
        from forestpy.io.vtk import VTKOutput

        try:
            frames = VTKOutput(out, kind=vtk_kind, every_steps=args.output_steps,
                               times=output_times, interval=args.output_interval,
                               tolerance=frame_tolerance, compression=frame_compression)
        except ValueError as e:
            raise CLIError(f"--frame-tolerance: {e}") from None
        sim.callbacks.append(frames)
    if args.checkpoint_interval is not None:  # last: it saves the other callbacks' state
        sim.callbacks.append(
            CheckpointEvery(
                out,
                args.checkpoint_interval,
                keep=args.checkpoint_keep,
                meta={"demo": demo_name, "demo_file": str(demo_path), "overrides": overrides},
                codec=args.checkpoint_codec,
            )
        )
    if nranks > 1:
        from forestpy.parallel import distribute

        try:
            sim = distribute(sim)  # wraps the callbacks above: they run on rank 0
        except (Exception, KeyboardInterrupt) as e:
            return fail(sim, e, "setup", time.perf_counter() - t0)
        base["mpi_ranks"] = nranks
    if rank == 0:  # after distribute: progress needs no gathered state
        sim.callbacks.insert(0, Progress(sys.stderr, every=0.1 if args.quiet else None))
    t0 = time.perf_counter()
    riemann = getattr(getattr(sim, "riemann", None), "name", None)
    watch.label = riemann or f"demo {demo_name}"
    watch.timers = sim.timers
    setup_compile_s = watch.seconds
    try:
        with watch:
            sim.run()
    except (Exception, KeyboardInterrupt) as e:
        return fail(sim, e, "run", time.perf_counter() - t0)

    # on every rank: with MPI the totals are a collective reduction (no gathered state)
    summary = {**base, **sim.summary(), "setup_compile_s": setup_compile_s, "status": "ok"}
    report = getattr(module, "report", None)
    if callable(report):
        # with MPI the state is gathered to rank 0 only (collective), which runs report
        with sim.root_view(0) as root:
            if root is not None:
                try:
                    result = report(root, out)
                except (Exception, KeyboardInterrupt) as e:
                    return fail(sim, e, "report", time.perf_counter() - t0)
                summary["report"] = to_jsonable(result)
                write_json(out / "report.json", summary["report"])
                print(json.dumps(summary["report"], indent=1))
    write_json(out / "summary.json", summary)
    if rank == 0:
        print(sim.timers.report(sim.wall_s))
        print(_summary_line(sim, summary, setup_compile_s))
        print(f"wrote {out / 'options_used.json'} and {out / 'summary.json'}")
    return 0


def _changed_sets(before: Mapping, now: Mapping) -> str:
    """``key: old -> new`` for every --set value that differs (``default`` if unset)."""
    keys = sorted(set(before) | set(now))
    return ", ".join(f"{k}: {before.get(k, 'default')!r} -> {now.get(k, 'default')!r}"
                     for k in keys if before.get(k, "default") != now.get(k, "default"))


def _no_write(path, data) -> None:
    """Stand-in for write_json_atomic on MPI ranks other than 0."""


def _run_standalone(module, args, out, base, overrides, in_effect, fail, usage_error,
                    vtk_kind, output_times, rank: int = 0) -> int:
    """Run a demo that is not a Simulation: ``main(out=..., **overrides) -> dict``.  Its
    solvers report their steps (progress) and, with ``--vtk``, give the frames of their
    uniform grid (:class:`forestpy.io.vtk.GridOutput`).  Under ``mpirun`` every rank
    calls ``main`` (the demo distributes its own solver); rank 0 writes the report,
    the summary and the options and prints."""
    from forestpy.callbacks import Progress, progress_scope
    from forestpy.errors import InputFileError
    from forestpy.io.summary import to_jsonable, write_json_atomic
    from forestpy.jit import CompileWatch
    from forestpy.options import OptionError


    unsupported = [flag for flag, value in (
        ("--checkpoint-interval", args.checkpoint_interval),
        ("--checkpoint-codec", args.checkpoint_codec),
        ("--restart", args.restart),
        ("--frame-tolerance", args.frame_tolerance),
        ("--frame-compression", args.frame_compression),
    ) if value is not None and value is not False]
    if unsupported:
        raise CLIError(f"{', '.join(unsupported)}: not available for {base['demo']!r}, "
                       "which runs its own solver (main(out, ...)), not a Simulation")
    write_json = write_json_atomic if rank == 0 else _no_write  # rank 0 writes the files
    write_json(out / "options_used.json",
                      {**base, "overrides": overrides, "demo_options": in_effect})
    t0 = time.perf_counter()
    err = sys.stderr if rank == 0 else io.StringIO()  # progress from rank 0
    watch = CompileWatch(err, label=f"demo {base['demo']}")
    observers = [Progress(err, every=0.1 if args.quiet else None, compile_watch=watch)]
    if vtk_kind is not None:  # frames of the uniform grid, whichever kind was asked for
        from forestpy.io.vtk import GridOutput

        observers.append(GridOutput(out, every_steps=args.output_steps, times=output_times,
                                    interval=args.output_interval))
    try:
        with watch, progress_scope(*observers):  # the solvers report their steps
            result = module.main(out=out, **overrides)
    except (OptionError, InputFileError) as e:  # a usage error: leave nothing behind
        with contextlib.suppress(OSError):
            (out / "options_used.json").unlink()
        raise usage_error(e) from e
    except (Exception, KeyboardInterrupt) as e:
        return fail(None, e, "run", time.perf_counter() - t0)
    wall = time.perf_counter() - t0
    result = to_jsonable(result if result is not None else {})
    write_json(out / "report.json", result)
    write_json(out / "summary.json", {**base, "status": "ok", "wall_s": wall,
                                             "compile_s": watch.seconds, "report": result})
    if rank != 0:
        return 0
    print(json.dumps(result, indent=1))
    compiling = f", of which compiling {watch.seconds:.1f} s" if watch.seconds >= 0.05 else ""
    print(f"wrote {out / 'report.json'} and {out / 'summary.json'} ({wall:.3g} s{compiling})")
    return 0


def _parse_floats(text: str, flag: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise CLIError(f"{flag} expects comma-separated numbers, got {text!r}") from None


def _plot_series(args, target: Path, what: str) -> int:
    """``forestpy plot DIR --gauges [FILE]`` / ``--fgmax [FILE]``."""
    from forestpy.io.plot import render_fgmax, render_gauges

    folder = target if target.is_dir() else target.parent
    given = args.gauges if what == "gauges" else args.fgmax
    if given not in (None, ""):
        path = Path(given)
        if not path.is_absolute() and not path.exists():
            path = folder / path
    else:
        names = (("gauges.csv", "gauges.nc", "gauges.npz") if what == "gauges"
                 else ("fgmax.npz",))
        path = next((folder / n for n in names if (folder / n).is_file()), folder / names[0])
    if not path.is_file():
        raise CLIError(f"--{what}: no such file {path}")
    default = "series" if what == "gauges" else "map"
    png = Path(args.png) if args.png else folder / f"{path.stem}_{args.field or default}.png"
    writable_folder(png.parent, "--png" if args.png else f"--{what}")
    try:
        if what == "gauges":
            out = render_gauges(path, args.field, png)
        else:
            out = render_fgmax(path, args.field, png)
    except (ValueError, RuntimeError, OSError) as e:
        raise CLIError(str(e)) from e
    print(f"{PROG} plot: wrote {out}")
    return 0


def cmd_plot(args, argv: list[str]) -> int:
    """Render frames of an output folder (or a .pvd / frame file) to PNG or a movie;
    or its gauges (``--gauges``) or fgmax map (``--fgmax``)."""
    target = Path(args.target)
    if not target.exists():
        raise CLIError(f"no such output folder or file: {target}")
    if args.gauges is not None and args.fgmax is not None:
        raise CLIError("--gauges and --fgmax: one at a time")
    if args.gauges is not None:
        return _plot_series(args, target, "gauges")
    if args.fgmax is not None:
        return _plot_series(args, target, "fgmax")
    try:
        from forestpy.io.plot import frame_files, leaf_blocks, render_frame, render_movie

        frames = frame_files(target)
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        raise CLIError(str(e)) from e
    if not frames:
        raise CLIError(f"{target}: the collection lists no frames")
    contour = None if args.contour is None else _parse_floats(args.contour, "--contour")
    folder = target if target.is_dir() else target.parent
    movie = None
    if args.movie is not None:
        movie = Path(args.movie)
        if not movie.is_absolute() and movie.parent == Path("."):
            movie = folder / movie
        if movie.suffix not in (".gif", ".mp4"):
            raise CLIError(f"--movie {args.movie}: the file must end in .gif or .mp4")
        writable_folder(movie.parent, "--movie")
    elif args.png:
        writable_folder(Path(args.png).parent, "--png")
    else:
        writable_folder(folder, "the frames' folder (where the images go; --png FILE "
                        "writes elsewhere)")
    field = args.field
    try:
        if field is None:  # the first derived field (depth for shallow water), else q0
            names = [n for n in leaf_blocks(frames[0][1])[0].cell_data if n != "vtkGhostType"]
            field = "depth" if "depth" in names else names[0]
        if movie is not None:
            path = render_movie(target, field, movie, fps=args.fps, contour=contour,
                                outlines=not args.no_outlines, cmap=args.cmap)
            print(f"{PROG} plot: wrote {path} ({len(frames)} frames of {field!r})")
            return 0
        if args.frame == "all":
            chosen = list(range(len(frames)))
        elif args.frame == "last":
            chosen = [len(frames) - 1]
        else:
            try:
                k = int(args.frame)
            except ValueError:
                raise CLIError(f"--frame expects an index, 'last' or 'all', got "
                               f"{args.frame!r}") from None
            if not -len(frames) <= k < len(frames):
                raise CLIError(f"--frame {k}: the run has {len(frames)} frames "
                               f"(0..{len(frames) - 1})")
            chosen = [k % len(frames)]
        for k in chosen:
            t, frame = frames[k]
            png = Path(args.png) if args.png and len(chosen) == 1 else \
                folder / f"{frame.stem}_{field}.png"
            path = render_frame(frame, field, png, contour=contour,
                                outlines=not args.no_outlines, cmap=args.cmap, time=t)
            print(f"{PROG} plot: wrote {path}")
    except (ValueError, RuntimeError, OSError) as e:
        raise CLIError(str(e)) from e
    return 0


def cmd_list(args, argv: list[str]) -> int:
    from forestpy.vtable import available_riemann, get_riemann

    names = available_riemann()
    print("Riemann solvers:")
    width = max((len(n) for n in names), default=0)
    for name in names:
        try:
            desc = get_riemann(name).description
        except Exception as e:  # noqa: BLE001 - one broken plug-in must not hide the others
            desc = f"(cannot load: {type(e).__name__}: {e})"
        print(f"  {name:<{width}}  {desc}".rstrip())
    return 0


# --------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="forestpy: adaptive quadtree-forest patches for hyperbolic PDEs.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="run a demo script",
        description=(
            "Run a demo script (module-level OPTIONS dict and setup(**overrides)). "
            "Writes DIR/options_used.json before the run and DIR/summary.json after it "
            "(also when it fails). Exit codes: 0 ok, 1 the simulation failed, 2 usage error."
        ),
    )
    run.add_argument("demo", nargs="?", default=None,
                     help="path of the demo script, e.g. demos/radial_dam.py")
    run.add_argument("--config", metavar="FILE", default=None,
                     help="run from a configuration file instead of a demo script (TOML, "
                     "GeoClaw-like: topography, dtopo, gauges, fgmax, regions, output "
                     "times; see docs/tutorial.md)")
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a demo option (repeatable); unknown keys are errors",
    )
    run.add_argument(
        "--backend",
        choices=("cpu", "gpu"),
        default=None,
        help="set the demo's 'backend' option",
    )
    run.add_argument(
        "--out", metavar="DIR", default=None, help="output folder (default: out/<demo name>)"
    )
    run.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar: a short line every ~10%% of simulated time instead",
    )
    run.add_argument(
        "--traceback", action="store_true", help="print the traceback when the run fails"
    )
    run.add_argument(
        "--vtk",
        choices=("amr", "flat"),
        default=None,
        help="write ParaView frames into DIR, indexed by DIR/frame.pvd (open it: every "
        "level, with times): 'amr' (a per-level .vtm plus the .vthb overlapping-AMR "
        "dataset) or 'flat' (the .vtm only); at the start, the end and the output times "
        "below",
    )
    run.add_argument("--output-interval", type=float, default=None, metavar="DT",
                     help="a frame every DT of simulated time (steps land on the times)")
    run.add_argument("--output-times", default=None, metavar="T1,T2,...",
                     help="frames at these simulated times (steps land on them)")
    run.add_argument("--output-steps", type=int, default=None, metavar="N",
                     help="a frame every N steps")
    run.add_argument(
        "--frame-tolerance", default=None, metavar="TOL",
        help="compressed frames, still plain VTK files: round every value to the fewest "
        "mantissa bits within TOL times its field's range in the frame (or name=T,... "
        "absolute per field, the others exact), then compress with --frame-compression "
        "(default zlib); errors and conserved totals go to DIR/frame_rounding.json "
        "(docs/compression.md)")
    run.add_argument(
        "--frame-compression", default=None, metavar="C[:LEVEL]",
        help="the VTK writers' compressor for frames: zlib, lz4, lzma or none, level 1-9 "
        "(default: VTK's, zlib)")
    run.add_argument(
        "--help-options",
        action="store_true",
        help="list the demo's options (type, default, valid values, description) and exit",
    )
    run.add_argument(
        "--checkpoint-interval",
        type=int,
        default=None,
        metavar="N",
        help="write DIR/checkpoint_<step>.npz every N steps and at the end (the last two "
        "kept) and DIR/checkpoint_latest.npz",
    )
    run.add_argument(
        "--checkpoint-codec",
        default=None,
        metavar="SPEC",
        help="compress the checkpoints' patch data: none, lossless (bit-for-bit restarts), "
        "fp16, dwt53:tol=T or dwt53:rtol=R (lossy within the bound, totals kept; "
        "docs/compression.md)",
    )
    run.add_argument(
        "--checkpoint-keep",
        type=int,
        default=2,
        metavar="K",
        help="how many numbered checkpoints to keep (default 2)",
    )
    run.add_argument(
        "--restart",
        metavar="FILE",
        default=None,
        help="continue from a checkpoint written by a run of the same demo with the same "
        "--set options",
    )
    run.add_argument(
        "--allow-changed-options",
        action="store_true",
        help="with --restart: continue although the --set options differ from the "
        "checkpoint's (e.g. a later t_final); without it that is an error",
    )
    run.set_defaults(func=cmd_run)

    plot = sub.add_parser(
        "plot",
        help="render output frames to PNG, or a whole run to GIF/MP4 (offscreen)",
        description=(
            "Render a frame of an output folder written by VTK output (forestpy run --vtk "
            "...) with pyvista offscreen: one field with a colour bar, patch outlines and "
            "optional contours. Needs pip install 'forestpy[plot]'."
        ),
    )
    plot.add_argument("target", help="output folder, its .pvd file, or one frame file")
    plot.add_argument("--field", default=None,
                      help="cell field to draw (default: depth when present, else the first)")
    plot.add_argument("--frame", default="last",
                      help="frame index (negative counts from the end), 'last' or 'all'")
    plot.add_argument("--contour", default=None, metavar="V1,V2,...",
                      help="contour levels drawn as white lines")
    plot.add_argument("--png", default=None, metavar="FILE",
                      help="PNG file for a single frame (default: beside the frame)")
    plot.add_argument("--movie", default=None, metavar="FILE.gif|FILE.mp4",
                      help="render every frame into one animation instead")
    plot.add_argument("--fps", type=float, default=5.0, help="movie frames per second")
    plot.add_argument("--cmap", default="viridis", help="matplotlib colour map name")
    plot.add_argument("--no-outlines", action="store_true", help="do not draw patch outlines")
    plot.add_argument("--gauges", nargs="?", const="", default=None, metavar="FILE",
                      help="plot the gauges' time series (DIR/gauges.csv, .nc or .npz, or FILE) "
                      "of --field (default surface) instead of a frame")
    plot.add_argument("--fgmax", nargs="?", const="", default=None, metavar="FILE",
                      help="map an fgmax field (DIR/fgmax.npz or FILE; --field default "
                      "max_depth) instead of a frame")
    plot.set_defaults(func=cmd_plot)

    lst = sub.add_parser("list", help="list the registered Riemann solvers")
    lst.set_defaults(func=cmd_list)
    return parser


def main(argv=None) -> int:
    """Entry point of the ``forestpy`` console script; returns the exit code."""
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: --help, --version or a usage error
        return e.code if isinstance(e.code, int) else 2
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.func(args, argv)
    except CLIError as e:
        message = " ".join(str(e).splitlines())  # one line, whatever the reader said
        print(f"{PROG} {args.command}: error: {message}", file=sys.stderr)
        return e.code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
