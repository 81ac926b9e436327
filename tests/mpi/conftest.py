"""The MPI launches: every scenario of ``mpi_scenarios.py`` that the selected tests name
(``@pytest.mark.mpi(...)``) runs in one ``mpirun`` per rank count, in one Python process
per rank (``scripts/run_demo.py --batch``); each test then checks the results of its
scenarios (the ``mpi`` fixture).

A launch runs under a time limit per scenario (a deadlock fails that scenario instead of
hanging CI); a scenario that raises or times out ends the launch, and the scenarios after
it are launched again without it, so every other scenario still gets its result.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from mpi_scenarios import SCENARIOS
from testsupport import mpirun

RUNNER = Path(__file__).resolve().parent / "scripts" / "run_demo.py"
MPIRUN = mpirun()
TIME_LIMIT = 120.0  # seconds per scenario, the compilation of the first one included


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "mpi(*names): the scenarios of tests/mpi/mpi_scenarios.py the test checks")


def _will_skip(item):
    return any(m.args and m.args[0] is True for m in item.iter_markers("skipif"))


class Launches:
    """The scenarios the session needs, launched a rank count at a time on first use."""

    def __init__(self, request, base, names):
        self.request, self.base = request, base
        self.needed = set(names)
        for name in names:  # a restore needs its checkpoint written first
            if SCENARIOS[name].get("after"):
                self.needed.add(SCENARIOS[name]["after"])
        self.failed = {}  # name: why
        self.launched = set()  # rank counts

    def out(self, name) -> Path:
        return self.base / name

    def _launch_group(self, ranks):
        if ranks in self.launched:
            return
        self.launched.add(ranks)
        names = sorted(n for n in self.needed if SCENARIOS[n]["ranks"] == ranks)
        for name in names:
            after = SCENARIOS[name].get("after")
            if after and SCENARIOS[after]["ranks"] != ranks:
                self._launch_group(SCENARIOS[after]["ranks"])
        # writers first (a key reading ``names`` itself would see it empty while sorted)
        launched = set(names)
        names.sort(key=lambda n: SCENARIOS[n].get("after") in launched)
        jobs = []
        for name in names:
            spec, out = SCENARIOS[name], self.out(name)
            out.mkdir(parents=True, exist_ok=True)
            opts = dict(spec["opts"])
            if spec.get("after"):
                opts["checkpoint"] = str(self.out(spec["after"]) / "ck.npz")
            if spec.get("prepare"):
                opts.update(spec["prepare"](out, self.request))
            jobs.append({"name": name, "out": str(out), "mode": spec["mode"], "opts": opts})
        while jobs:
            jobs = self._run(ranks, jobs)

    def _run(self, ranks, jobs):
        """Launch ``jobs``; returns those still to run after a failure (without it)."""
        jobs_file = self.base / f"jobs_{ranks}_{len(jobs)}.json"
        jobs_file.write_text(json.dumps(jobs))
        cmd = [MPIRUN, "-n", str(ranks), sys.executable, str(RUNNER), "--batch", str(jobs_file)]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
        log = self.base / f"launch_{ranks}_{len(jobs)}.log"
        with open(log, "w") as f:
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
            timed_out = None
            while proc.poll() is None:
                time.sleep(0.2)
                running = [j for j in jobs if (Path(j["out"]) / "started").exists()
                           and not (Path(j["out"]) / "done").exists()]
                started = running and (Path(running[0]["out"]) / "started").read_text()
                if started:  # (empty while rank 0 writes it)
                    if time.time() - float(started) > TIME_LIMIT:
                        timed_out = running[0]["name"]
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait()
        output = log.read_text()
        rest = [j for j in jobs if not (Path(j["out"]) / "done").exists()]
        if not rest:
            if proc.returncode != 0:  # all done, then failed: blame nobody, say it
                for j in jobs:
                    self.failed[j["name"]] = f"mpirun exited with {proc.returncode}:\n{output}"
            return []
        bad = rest[0]
        errors = sorted(Path(bad["out"]).glob("error_rank*.txt"))
        if timed_out:
            why = f"timed out after {TIME_LIMIT:.0f} s (a deadlock?)"
        elif errors:
            why = "\n".join(f"{e.name}:\n{e.read_text()}" for e in errors)
        else:
            why = f"mpirun exited with {proc.returncode} before the scenario ended"
        self.failed[bad["name"]] = f"{why}\n--- output of the launch ---\n{output[-20000:]}"
        again = []
        for job in rest[1:]:
            if SCENARIOS[job["name"]].get("after") == bad["name"]:
                self.failed[job["name"]] = f"needs {bad['name']}, which failed"
            else:
                again.append(job)
        return again

    def get(self, name):
        if name not in self.needed:
            raise KeyError(f"{name} is not among the scenarios of the test's mpi marker")
        self._launch_group(SCENARIOS[name]["ranks"])
        if name in self.failed:
            pytest.fail(f"MPI scenario {name} (-n {SCENARIOS[name]['ranks']}): "
                        f"{self.failed[name]}", pytrace=False)
        out = self.out(name)
        if SCENARIOS[name]["mode"] == "cli":
            return json.loads((out / "cli.json").read_text())
        result = dict(np.load(out / "result.npz"))
        assert len(result["owned"]) == SCENARIOS[name]["ranks"], \
            "the ranks did not form one MPI job"
        return result


@pytest.fixture(scope="session")
def mpi_launches(request, tmp_path_factory):
    if MPIRUN is None:
        pytest.skip("mpirun not installed (pip install mpich)")
    pytest.importorskip("mpi4py")
    names = set()
    for item in request.session.items:
        if not _will_skip(item):
            for marker in item.iter_markers("mpi"):
                names.update(marker.args)
    unknown = names - set(SCENARIOS)
    assert not unknown, f"no such scenarios in mpi_scenarios.py: {sorted(unknown)}"
    return Launches(request, tmp_path_factory.mktemp("mpi"), names)


class Scenarios:
    """What a test sees: ``mpi(name)`` the result of one of its marker's scenarios
    (rank 0's ``result.npz`` as a dict; for a command-line scenario the exit code and
    standard output of every rank), ``mpi.out(name)`` its output folder."""

    def __init__(self, launches, names):
        self.launches, self.names = launches, names

    def __call__(self, name):
        assert name in self.names, f"add {name!r} to the test's mpi marker"
        return self.launches.get(name)

    def out(self, name) -> Path:
        assert name in self.names, f"add {name!r} to the test's mpi marker"
        return self.launches.out(name)


@pytest.fixture
def mpi(request, mpi_launches):
    names = {n for m in request.node.iter_markers("mpi") for n in m.args}
    return Scenarios(mpi_launches, names)
