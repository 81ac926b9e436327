"""The per-solver kernel modules and their on-disk cache."""

import os
import subprocess
import sys
import textwrap
import types

from forestpy.solvers.clawpack import kernel_cache
from forestpy.solvers.clawpack.step_kernel import jit_pointwise

from forestpy.vtable import RiemannSolver, get_riemann


def _solver_with_constant(value: float, name: str) -> RiemannSolver:
    """An advection solver whose speed is a module-level constant of its globals."""
    source = textwrap.dedent("""
        def rpn2(ixy, ql, qr, auxl, auxr, params, wave, s, amdq, apdq):
            wave[0, 0] = qr[0] - ql[0]
            s[0] = SPEED
            amdq[0] = min(SPEED, 0.0) * wave[0, 0]
            apdq[0] = max(SPEED, 0.0) * wave[0, 0]
    """)
    scope = {"SPEED": value, "__name__": f"generated_{name}"}
    exec(source, scope)
    return RiemannSolver(name=name, num_eqn=1, num_waves=1, rpn2=scope["rpn2"])


def test_fingerprint_follows_the_code_and_its_constants():
    a, b = _solver_with_constant(1.0, "cache_a"), _solver_with_constant(2.0, "cache_a")
    fa = kernel_cache.physics_fingerprint(a)
    assert fa == kernel_cache.physics_fingerprint(_solver_with_constant(1.0, "cache_a"))
    assert fa != kernel_cache.physics_fingerprint(b)  # SPEED is frozen into the kernel
    roe, hlle = get_riemann("shallow_roe"), get_riemann("shallow_hlle")
    assert kernel_cache.physics_fingerprint(roe) != kernel_cache.physics_fingerprint(hlle)


def test_unwritable_cache_directory_falls_back_to_a_temporary_module(tmp_path, monkeypatch):
    blocker = tmp_path / "not_a_directory"
    blocker.write_text("")
    monkeypatch.setenv("FORESTPY_CACHE_DIR", str(blocker / "kernels"))
    module = kernel_cache.kernel_module(_solver_with_constant(3.0, "cache_fallback"),
                                        jit_pointwise)
    assert isinstance(module, types.ModuleType)
    assert module.CACHE is False and module.MEQN == 1
    assert not str(module.__file__).startswith(str(blocker))


def test_a_second_process_loads_the_compiled_kernels_from_disk(tmp_path):
    script = textwrap.dedent("""
        import numpy as np
        from forestpy import Domain, Simulation
        sim = Simulation("advection", qinit=lambda x, y: np.exp(-20 * (x * x + y * y))[None],
                         domain=Domain((-1, -1), (1, 1), periodic=(True, True)),
                         bc="periodic", mx=8, min_level=1, max_level=2, t_final=0.1)
        sim.run()
        from forestpy.solvers.clawpack import kernel_cache
        module = next(iter(kernel_cache._MODULES.values()))
        print(sum(module.engine.stats.cache_hits.values()),
              sum(module.engine.stats.cache_misses.values()), sim.totals()["q"])
    """)
    # Numba's cache beside the generated file (NUMBA_CACHE_DIR would move it elsewhere)
    env = {**{k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"},
           "FORESTPY_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, check=True).stdout.split() for _ in range(2)]
    (hits1, misses1, total1), (hits2, misses2, total2) = runs
    assert int(misses1) >= 1 and int(hits1) == 0  # compiled and stored
    assert int(hits2) >= 1 and int(misses2) == 0  # loaded, not compiled
    assert total1 == total2
    assert any(p.suffix == ".nbc" for p in (tmp_path / "__pycache__").iterdir())


def test_every_module_the_template_imports_code_from_is_in_the_kernel_name():
    # Numba's disk cache of a kernel module checks only that module's own file: a
    # change of a helper it compiles in (the limiters, the stack arrays) must give the
    # kernels a new name, so the helpers' text is hashed into it
    import re

    template = kernel_cache._TEMPLATE.read_text()
    imported = set(re.findall(r"^from forestpy\.solvers\.clawpack\.(\w+) import", template,
                              re.MULTILINE))
    assert imported, "the template imports no forestpy helper: the test is stale"
    hashed = {f.stem for f in kernel_cache._IMPORTED}
    assert imported <= hashed, f"not in the kernel name: {sorted(imported - hashed)}"
    assert all(f.is_file() for f in kernel_cache._IMPORTED)
