"""The disk cache of compiled CUDA kernels (forestpy.cuda_cache): what its key sees.

A stale hit would launch old machine code, so the fingerprint must change with anything
that changes the compiled code (the kernel's own code, a called function's, a closure
constant, a frozen global array) and refuse what it cannot vouch for; and it must be the
same in every process, or the cache never hits.  The cache's loads and stores run on a
real GPU (benchmarks/gpu_compile_profile.py run twice; the GPU tests with the cache on)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from forestpy.cuda_cache import kernel_fingerprint, load, store, uncacheable_reason


def _helper(x):
    return x + 1.0


def _other_helper(x):
    return x + 2.0


TABLE = np.array([1.0, 2.0])
SETTINGS = {"a": 1}


def _make(c, helper):
    def kernel(out):
        out[0] = helper(c) + TABLE[0]

    return kernel


def test_fingerprint_follows_the_code_the_kernel_compiles_from():
    a = kernel_fingerprint(_make(1, _helper))
    assert a is not None and a == kernel_fingerprint(_make(1, _helper))
    assert a != kernel_fingerprint(_make(2, _helper))  # a closure constant
    assert a != kernel_fingerprint(_make(1, _other_helper))  # a called function
    TABLE[0] = 5.0  # a global array is frozen into the compiled code
    try:
        assert a != kernel_fingerprint(_make(1, _helper))
    finally:
        TABLE[0] = 1.0
    assert a == kernel_fingerprint(_make(1, _helper))


def test_fingerprint_refuses_what_it_cannot_vouch_for():
    def reads_a_dict(out):
        out[0] = SETTINGS["a"]

    assert kernel_fingerprint(reads_a_dict) is None
    assert "dict" in uncacheable_reason(reads_a_dict)
    assert uncacheable_reason(_make(1, _helper)) is None


def test_step_kernel_fingerprint_is_the_same_in_every_process():
    code = ("from forestpy.solvers.clawpack.gpu_kernel import make_gpu_step_kernel\n"
            "from forestpy.vtable import get_riemann\n"
            "from forestpy.cuda_cache import kernel_fingerprint\n"
            "for order in (2, 1):\n"
            "    k, _ = make_gpu_step_kernel(get_riemann('shallow_roe'), 8, 8, 2, order=order)\n"
            "    print(kernel_fingerprint(k))\n")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout.split()[-2:] for _ in range(2)]
    assert "None" not in runs[0] and runs[0] == runs[1]
    assert runs[0][0] != runs[0][1]  # the order is a compile-time constant


def test_store_and_load_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("FORESTPY_CACHE_DIR", str(tmp_path))
    assert load("f" * 64, ("array(float64, 4d, C)",), (9, 0)) is None
    store("f" * 64, ("array(float64, 4d, C)",), (9, 0), "_Z6kernel", ("array",), b"\x7fELF")
    assert load("f" * 64, ("array(float64, 4d, C)",), (9, 0)) == (
        "_Z6kernel", ("array",), b"\x7fELF")
    assert load("f" * 64, ("array(float64, 4d, C)",), (8, 0)) is None  # another device
    (next((tmp_path / "cuda").glob("*.pkl"))).write_bytes(b"garbage")
    assert load("f" * 64, ("array(float64, 4d, C)",), (9, 0)) is None
