"""Backends: where field arrays live and how kernels run.

A backend is passed explicitly (never a global).  Numerics code asks it for the array
module ``xp`` and moves data only through :meth:`Backend.to_host` (counted, so tests can
assert that a time step moves no field data) and :meth:`Backend.to_device`.

``cpu``  NumPy arrays, Numba kernels parallel over patches.
``gpu``  CuPy arrays resident on an NVIDIA GPU, Numba-CUDA kernels.  With
         ``NUMBA_ENABLE_CUDASIM=1`` (no GPU needed) the same CUDA kernels run in Numba's
         CUDA simulator on NumPy arrays: slow, for testing the GPU code paths on tiny
         cases.
"""

from __future__ import annotations

import functools
import inspect
import os

import numpy as np

__all__ = [
    "Backend",
    "CPUBackend",
    "GPUBackend",
    "get_backend",
    "array_module",
    "contract_multiply_add",
    "cuda_simulator_enabled",
]

DTYPES = {"float64": np.float64, "float32": np.float32}


def array_module(a):
    """``cupy`` for a CuPy array, else ``numpy`` (for code that receives backend arrays)."""
    if type(a).__module__.startswith("cupy"):
        import cupy

        return cupy
    return np


def cuda_simulator_enabled() -> bool:
    """True when Numba runs CUDA kernels in its simulator (``NUMBA_ENABLE_CUDASIM=1``)."""
    import numba

    return bool(numba.config.ENABLE_CUDASIM)


class Backend:
    """Base class: name, array module, counted transfers, synchronisation."""

    name = "abstract"
    xp = np
    is_gpu = False

    def __init__(self, dtype="float64"):
        self.host_transfers = 0
        if np.dtype(dtype).name not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}; valid: {sorted(DTYPES)}")
        self.dtype = np.dtype(dtype)

    def to_host(self, a):
        """Return ``a`` as a NumPy array; every call is counted in ``host_transfers``."""
        self.host_transfers += 1
        return np.asarray(a)

    def to_device(self, a, dtype=None):
        """A backend array with the contents of ``a`` (a copy on the GPU)."""
        return self.xp.asarray(a, dtype=dtype)

    def synchronize(self) -> None:
        """Wait for queued device work (a no-op on the CPU)."""

    def describe(self) -> dict:
        return {"backend": self.name, "dtype": self.dtype.name}


class CPUBackend(Backend):
    """NumPy arrays, Numba kernels parallel over patches."""

    name = "cpu"
    xp = np

    def __init__(self, dtype="float64"):
        super().__init__(dtype)
        if self.dtype != np.float64:
            raise ValueError("the CPU backend computes in float64 only; dtype='float32' "
                             "is a GPU option")

    def describe(self) -> dict:
        import os
        import platform

        import numba

        return {
            **super().describe(),
            "device": platform.processor() or platform.machine(),
            "numba_threads": numba.config.NUMBA_NUM_THREADS,
            "cpu_count": os.cpu_count(),
        }


_FMA = {"enabled": None}  # see contract_multiply_add


def contract_multiply_add(enabled: bool) -> None:
    """Whether NVVM may fuse ``a * b + c`` into one fused multiply-add (one rounding
    instead of two) in the kernels compiled from now on.

    NVVM contracts by default even without ``fastmath``; the CPU (LLVM without fast-math
    flags) never does, so the two backends round differently, and at wet/dry fronts a
    last-bit difference decides whether a cell is wet and grows from there.  Off, the
    GPU kernels do the CPU's operations with the CPU's roundings.  Set by the GPU backend
    (``GPUBackend(fma=...)``); kernels compiled before a change keep their code.
    """
    enabled = bool(enabled)
    if _FMA["enabled"] is None:
        from numba.cuda.cudadrv import nvvm

        unit = nvvm.CompilationUnit
        # numba-cuda takes NVVM's options in the constructor (newer) or in compile()
        if "options" in inspect.signature(unit.__init__).parameters:
            init = unit.__init__

            @functools.wraps(init)
            def init_with_fma_choice(self, options, *args, **kw):
                options = dict(options)
                options.setdefault("fma", _FMA["enabled"])  # fastmath=True keeps its own
                return init(self, options, *args, **kw)

            unit.__init__ = init_with_fma_choice
        else:
            compile_ = unit.compile

            @functools.wraps(compile_)
            def compile_with_fma_choice(self, **options):
                options.setdefault("fma", _FMA["enabled"])
                return compile_(self, **options)

            unit.compile = compile_with_fma_choice
        # with link-time optimisation nvJitLink generates the code from NVVM's LTO-IR
        # and contracts on its own; forestpy links no external device code, so linking
        # the PTX gives the same kernels with the contraction NVVM was told
        from numba.cuda import codegen

        library = codegen.CUDACodeLibrary
        if "lto" in inspect.signature(library.__init__).parameters:
            lib_init = library.__init__

            @functools.wraps(lib_init)
            def init_without_lto(self, *args, **kw):
                lib_init(self, *args, **kw)
                if not _FMA["enabled"]:
                    self._lto = False

            library.__init__ = init_without_lto
    _FMA["enabled"] = enabled


class GPUBackend(Backend):
    """Field arrays resident on one NVIDIA GPU (CuPy); kernels in Numba-CUDA.

    ``dtype="float32"`` stores fields in single precision (arithmetic inside the
    kernels stays float64).  In the CUDA simulator ``xp`` is NumPy.

    ``fma``: whether the CUDA compiler may contract ``a * b + c`` into fused
    multiply-adds (default: no, or ``FORESTPY_GPU_FMA=1``).  Without them the kernels
    round as the CPU kernels do and the two backends give the same bits step by step
    (:func:`contract_multiply_add`).  What the fused form would
    gain in the step kernel's speed is not measured yet (``benchmarks/gpu_step.py``).
    """

    name = "gpu"
    is_gpu = True

    def __init__(self, dtype="float64", device: int | None = None, fma: bool | None = None):
        super().__init__(dtype)
        if fma is None:
            fma = os.environ.get("FORESTPY_GPU_FMA", "0") == "1"
        self.fma = bool(fma)
        import numba

        self.simulator = cuda_simulator_enabled()
        if self.simulator:
            self.xp = np
            self.device_name = "Numba CUDA simulator"
            return
        from numba import cuda

        if not cuda.is_available():
            raise RuntimeError(
                "the GPU backend needs an NVIDIA GPU with a working CUDA driver (none "
                "found); use --backend cpu, or NUMBA_ENABLE_CUDASIM=1 to test the GPU "
                "code paths in Numba's CUDA simulator"
            )
        try:
            import cupy
        except ImportError as exc:
            raise RuntimeError(
                "the GPU backend needs CuPy (pip install cupy-cuda12x or cupy-cuda13x)"
            ) from exc
        if device is not None:
            cuda.select_device(device)
            cupy.cuda.Device(device).use()
        # CuPy and Numba both launch on the legacy default stream, so work is ordered;
        # do not let Numba synchronise on every CuPy array it receives
        numba.config.CUDA_ARRAY_INTERFACE_SYNC = False
        contract_multiply_add(self.fma)
        self.xp = cupy
        self.device_name = cuda.get_current_device().name
        if isinstance(self.device_name, bytes):
            self.device_name = self.device_name.decode()

    def to_device(self, a, dtype=None):
        """A device copy of ``a`` (a copy in the simulator too, as on a GPU)."""
        if self.simulator:
            return np.array(a, dtype=dtype, copy=True)
        return self.xp.asarray(a, dtype=dtype)

    def to_host(self, a):
        self.host_transfers += 1
        if self.simulator:
            return np.asarray(a)
        import cupy

        return cupy.asnumpy(a)

    def synchronize(self) -> None:
        if not self.simulator:
            from numba import cuda

            cuda.synchronize()

    def describe(self) -> dict:
        return {**super().describe(), "device": self.device_name,
                "cuda_simulator": self.simulator, "fused_multiply_add": self.fma}


def get_backend(name: str | Backend = "cpu", dtype="float64") -> Backend:
    """Return a new backend object for ``name`` (``"cpu"`` or ``"gpu"``)."""
    if isinstance(name, Backend):
        return name
    if name == "cpu":
        return CPUBackend(dtype)
    if name == "gpu":
        return GPUBackend(dtype)
    raise ValueError(f"unknown backend {name!r}; valid: 'cpu', 'gpu'")
