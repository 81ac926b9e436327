"""Solvers with the same physics share one generated kernel file (and Numba's cache)."""

import dataclasses

from forestpy.solvers.clawpack import kernel_cache

from forestpy.vtable import get_riemann


def test_a_renamed_copy_of_a_solver_shares_the_kernel_file(tmp_path, monkeypatch):
    monkeypatch.setenv("FORESTPY_CACHE_DIR", str(tmp_path))
    roe = get_riemann("shallow_roe")
    copy = dataclasses.replace(roe, name="my_roe")
    assert kernel_cache.physics_fingerprint(roe) == kernel_cache.physics_fingerprint(copy)
    assert kernel_cache._module_text(roe, True) == kernel_cache._module_text(copy, True)
