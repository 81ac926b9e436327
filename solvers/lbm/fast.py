r"""The register kernel: a D3Q27 step for the GPU with the 27 distributions and the
collision in registers, generated for one grid and one precision.

The kernel of :mod:`.gpu` runs the CPU's cell body (:func:`.kernels.lbm_cell`): loops
over ``q`` that index constant tables and a 27-value scratch array in local memory, the
cell coordinates from two integer divisions, float64 arithmetic whatever the storage and
one branch per neighbour for bounce-back.  This module writes the same step (same
storage, same AA pattern, same cell kinds and boundary rules: the module docstring of
:mod:`.kernels`) as straight-line code, the way FluidX3D-class codes do, and compiles it
with Numba-CUDA:

* **unrolled**: the source is generated (:func:`kernel_source`) with one scalar per
  population (``f0 .. f26``), every lattice constant a literal, terms with a zero
  velocity component left out; no per-thread array, so nothing goes to local memory
  (``benchmarks/lbm_kernel_resources.py`` checks with ``ptxas``: no spills, no stack);
* **specialised** to the grid shape (the sizes, ``q * ncell`` offsets and periodic wrap
  are constants; the neighbour of ``(i, j, k)`` is a sum of three precomputed offsets,
  the wrap two selects per axis) and to what the grid holds: without walls no flag is
  read, without a body force the forcing terms are left out, without an inlet or an
  outlet their code is left out;
* **working precision** ``arith``: ``"float64"`` (the constants and every operation
  float64: the same operations in the same order as the CPU kernel, hence the same
  values, tested bit for bit) or ``"float32"`` (constants rounded to float32, the
  arithmetic float32, compiled with ``fastmath`` so that multiply-adds fuse: the mode
  for FP32 and FP16 storage, FluidX3D's choice);
* **3D launch**: ``k`` (the fastest axis of the ``(27, nx, ny, nz)`` structure of
  arrays) from ``blockIdx.x * THREADS + threadIdx.x``, ``j`` and ``i`` from
  ``blockIdx.y`` and ``blockIdx.z``: consecutive threads touch consecutive addresses of
  each of the 27 rows, no division;
* **bounce-back without a branch per neighbour**: the odd step reads the 26 neighbour
  flags once into two bit masks (wall, moving wall); each population is then one load
  (and one store) whose address is *selected* between the neighbour's slot and the
  cell's own reflected slot, the moving-wall momentum term added times its bit;
* **32-bit indices**: cell indices are int32 (``27 * ncell < 2^31``, checked);
* **in place (AA pattern)** rather than pull with two copies: the same 216 bytes per
  cell and step in FP32 (27 values read, 27 written) from half the memory, and the
  state keeps the layout the other kernels, the host views and the in-situ codec use,
  so the kernels are interchangeable from one step to the next.

FP16 storage (:mod:`.fp16`) is read through a float16 view of the uint16 store and
converted by the hardware (``half -> float``, ``float -> half`` round to nearest even,
from the working precision: in float32 mode this can differ from the CPU's float64
rounding by one unit of the half in the last place).

The kernel is selected with ``LBM(..., kernel="register")`` or the environment variable
``FORESTPY_LBM_KERNEL=register`` (default ``cell``, the kernel of :mod:`.gpu`).
"""

from __future__ import annotations

import os

import numpy as np

from .kernels import PRESSURE, SOLID, VELOCITY
from .lattice import OPP, C, Q, W

__all__ = ["ARITH", "THREADS", "kernel_source", "register_kernels", "check_shape"]

#: working precisions
ARITH = ("float32", "float64")
#: threads per block (along ``k``)
THREADS = 128
#: the grids an int32 index reaches: 27 * ncell < 2^31
MAX_INDEX = 2**31 - 1

_AX = ("i", "j", "k")


def check_shape(shape) -> None:
    """Raise ``ValueError`` unless the register kernel can index ``shape``."""
    nx, ny, nz = (int(s) for s in shape)
    if Q * nx * ny * nz > MAX_INDEX:
        raise ValueError(f"the register kernel indexes with int32: 27 * nx * ny * nz must "
                         f"be < 2^31, got shape {tuple(shape)}")
    if ny > 65535 or nx > 65535:
        raise ValueError(f"the register kernel launches ny x nx blocks of rows: ny and nx "
                         f"must be <= 65535, got shape {tuple(shape)}")


def _dot(c, names):
    """Source of ``sum_a c_a * names_a`` with the zero terms left out (``None`` if all
    are zero); ``+-1`` components as additions and subtractions, in axis order (the CPU
    kernel's ``CX*x + CY*y + CZ*z`` gives the same value: ``0*x`` adds a zero, ``-1*x``
    is exact)."""
    out = ""
    for ca, name in zip(c, names):
        if ca == 0:
            continue
        if not out:
            out = name if ca > 0 else f"-{name}"
        else:
            out += f" + {name}" if ca > 0 else f" - {name}"
    return out or None


def _offsets(c):
    """The neighbour-index expression of the cell at ``x + c``."""
    parts = []
    for ca, ax in zip(c, _AX):
        parts.append(f"o{ax}{'m' if ca < 0 else ('p' if ca > 0 else '0')}")
    return " + ".join(parts)


def kernel_source(shape, arith="float32", storage="float32", forced=True, walls=True,
                  inlet=True, outlet=None, threads=THREADS) -> str:
    """Python source of the two CUDA kernels ``step_even`` and ``step_odd``
    (module-level functions; the globals they use: ``cuda``, ``np``, ``F`` the working
    float type, ``H`` the storage's, ``U`` = ``np.uint32``, the type of the array
    indices: unsigned, so Numba emits no negative-index wrap-around).

    ``shape``: the grid; ``arith``: ``"float32"`` or ``"float64"``; ``storage``:
    ``"float16"`` (a float16 view of the uint16 store of :mod:`.fp16`), ``"float32"``
    or ``"float64"``; ``forced``: include the Guo forcing terms; ``walls``: the grid has
    solid or inlet cells (read the flags); ``inlet``: it has inlet cells (the
    moving-wall term); ``outlet``: the outward normal of its pressure-outlet cells, or
    ``None`` without them; ``threads``: the block size (along ``k``).  Kernel
    arguments: ``(h, flags, om_p, om_m, fx, fy, fz, rho_in, ux_in, uy_in, uz_in,
    rho_out)``, ``h`` the flat ``27 * ncell`` store.
    """
    if arith not in ARITH:
        raise ValueError(f"arith must be one of {ARITH}, got {arith!r}")
    if storage not in ("float16", "float32", "float64"):
        raise ValueError(f"storage must be float16, float32 or float64, got {storage!r}")
    nx, ny, nz = (int(s) for s in shape)
    check_shape(shape)
    ncell = nx * ny * nz
    inlet = inlet and walls
    kinds = walls or outlet is not None
    L: list[str] = []

    def emit(line, ind=1):
        L.append("    " * ind + line)

    def lit(x):
        return f"F({float(x)!r})"

    def load(idx):
        idx = f"U({idx})"
        if storage == "float16":
            return f"F(h[{idx}]) * INV_SCALE"
        return f"F(h[{idx}])" if storage != arith else f"h[{idx}]"

    def store(idx, val, ind=1):
        idx = f"U({idx})"
        if storage == "float16":
            emit(f"h[{idx}] = np.float16(({val}) * SCALE)", ind)
        elif storage != arith:
            emit(f"h[{idx}] = H({val})", ind)
        else:
            emit(f"h[{idx}] = {val}", ind)

    def head(name):
        L.append(f"def {name}(h, flags, a_om_p, a_om_m, a_fx, a_fy, a_fz, a_rho_in, "
                 "a_ux_in, a_uy_in, a_uz_in, a_rho_out):")
        emit(f"k = np.int32(cuda.blockIdx.x * {threads} + cuda.threadIdx.x)")
        emit(f"if k >= {nz}:")
        emit("return", 2)
        emit("j = np.int32(cuda.blockIdx.y)")
        emit("i = np.int32(cuda.blockIdx.z)")
        emit(f"n = np.int32(np.int32(i * {ny * nz}) + np.int32(j * {nz}) + k)")
        if kinds:
            emit("kind = flags[U(n)]")
            emit(f"if kind == {SOLID} or kind == {VELOCITY}:")
            emit("return", 2)
        for v in ("om_p", "om_m", "fx", "fy", "fz", "rho_in", "ux_in", "uy_in", "uz_in",
                  "rho_out"):
            emit(f"{v} = F(a_{v})")

    def neighbours():
        # offsets of the planes, rows and columns at -1, 0, +1 (periodic wrap: selects)
        for ax, size, stride in (("i", nx, ny * nz), ("j", ny, nz), ("k", nz, 1)):
            emit(f"{ax}m = np.int32({ax} - 1) if {ax} > 0 else np.int32({size - 1})")
            emit(f"{ax}p = np.int32({ax} + 1) if {ax} < {size - 1} else np.int32(0)")
            for s in ("m", "0", "p"):
                src = ax if s == "0" else f"{ax}{s}"
                emit(f"o{ax}{s} = np.int32({src} * {stride})" if stride != 1
                     else f"o{ax}{s} = {src}")

    def wall_term(q):
        cu = _dot(C[q], ("ux_in", "uy_in", "uz_in"))
        if cu is None:
            return None
        return f"{lit(6.0 * W[q])} * rho_in * ({cu})"

    def collide(put):
        """f0..f26 (post-streaming) -> g0..g26 (post-collision), each pair stored by
        ``put(q, indent)`` as soon as it is known (fewer values live at once)."""
        # moments (h = f - w: sum_q w_q = 1, sum_q w_q c_q = 0)
        emit("drho = f0")
        for ax in "xyz":
            emit(f"j{ax} = {lit(0.0)}")
        for q in range(1, 14):
            emit(f"drho += f{q} + f{q + 13}")
            emit(f"d{q} = f{q} - f{q + 13}")
            for a, ax in enumerate("xyz"):
                if C[q][a]:
                    emit(f"j{ax} {'+' if C[q][a] > 0 else '-'}= d{q}")
        emit(f"rho = {lit(1.0)} + drho")
        if outlet is not None:
            emit(f"if kind == {PRESSURE}:")
            collide_outlet(2, put)
            emit("else:")
            collide_fluid(2, put)
        else:
            collide_fluid(1, put)

    def collide_outlet(ind, put):
        # rho_out (1 + u_n) = S_0 + 2 S_out from the arriving populations (Zou & He)
        emit(f"s0 = {lit(0.0)}", ind)
        emit(f"sout = {lit(0.0)}", ind)
        for q in range(Q):
            cn = int(C[q] @ np.asarray(outlet))
            if cn == 0:
                emit(f"s0 += f{q} + {lit(W[q])}", ind)
            elif cn > 0:
                emit(f"sout += f{q} + {lit(W[q])}", ind)
        emit(f"un = (s0 + {lit(2.0)} * sout) / rho_out - {lit(1.0)}", ind)
        emit(f"odrho = rho_out - {lit(1.0)}", ind)
        emit("ouu = un * un", ind)
        emit(f"g0 = {lit(W[0])} * (odrho - {lit(1.5)} * rho_out * ouu)", ind)
        put(0, ind)
        for q in range(1, 14):
            cn = int(C[q] @ np.asarray(outlet))
            cu = {0: lit(0.0), 1: "un", -1: "-un"}[cn]
            emit(f"cu = {cu}", ind)
            emit(f"eqp = {lit(W[q])} * (odrho + rho_out * ({lit(4.5)} * cu * cu - "
                 f"{lit(1.5)} * ouu))", ind)
            emit(f"eqm = {lit(W[q])} * ({lit(3.0)} * rho_out * cu)", ind)
            emit(f"g{q} = eqp + eqm", ind)
            emit(f"g{q + 13} = eqp - eqm", ind)
            put(q, ind)
            put(q + 13, ind)

    def collide_fluid(ind, put):
        half = lit(0.5)
        for ax in "xyz":
            src = f"(j{ax} + {half} * f{ax})" if forced else f"j{ax}"
            emit(f"u{ax} = {src} / rho", ind)
        emit("uu = ux * ux + uy * uy + uz * uz", ind)
        emit(f"uu15 = {lit(1.5)} * uu", ind)
        emit(f"rho15 = {lit(1.5)} * rho", ind)
        emit(f"rho3 = {lit(3.0)} * rho", ind)
        if forced:
            emit("uf = ux * fx + uy * fy + uz * fz", ind)
            emit(f"gp = {lit(1.0)} - {half} * om_p", ind)
            emit(f"gm = {lit(1.0)} - {half} * om_m", ind)
            emit(f"uf3 = {lit(3.0)} * uf", ind)
        w0 = lit(W[0])
        rest = f"f0 - om_p * (f0 - {w0} * (drho - rho15 * uu))"
        if forced:
            rest += f" + gp * ({w0} * (-uf3))"
        emit(f"g0 = {rest}", ind)
        put(0, ind)
        for q in range(1, 14):
            w = lit(W[q])
            emit(f"cu = {_dot(C[q], ('ux', 'uy', 'uz'))}", ind)
            emit(f"eqp = {w} * (drho + rho * ({lit(4.5)} * cu * cu - uu15))", ind)
            emit(f"eqm = {w} * (rho3 * cu)", ind)
            dp = f"om_p * ({half} * (f{q} + f{q + 13}) - eqp)"
            dm = f"om_m * ({half} * (f{q} - f{q + 13}) - eqm)"
            if forced:
                emit(f"cf = {_dot(C[q], ('fx', 'fy', 'fz'))}", ind)
                emit(f"sp = {w} * ({lit(9.0)} * cu * cf - uf3)", ind)
                emit(f"sm = {w} * ({lit(3.0)} * cf)", ind)
                dp += " - gp * sp"
                dm += " - gm * sm"
            emit(f"dp = {dp}", ind)
            emit(f"dm = {dm}", ind)
            emit(f"g{q} = f{q} - dp - dm", ind)
            emit(f"g{q + 13} = f{q + 13} - dp + dm", ind)
            put(q, ind)
            put(q + 13, ind)

    def off(q):
        return q * ncell

    # ---- even step: local, h[q, n] -> collide -> h[OPP[q], n]
    head("step_even")
    for q in range(Q):
        emit(f"f{q} = {load(f'{off(q)} + n')}")
    collide(lambda q, ind: store(f"{off(OPP[q])} + n", f"g{q}", ind))
    L.append("")

    # ---- odd step: pull from x - c_q (or the reflected own slot), push to x + c_q
    head("step_odd")
    neighbours()
    if walls:
        # bit d of wall (mov): the neighbour x + c_d is a wall (a moving wall)
        emit("wall = 0")
        if inlet:
            emit("mov = 0")
        for d in range(1, Q):
            emit(f"nb = flags[U({_offsets(C[d])})]")
            emit(f"wall |= np.int32(nb == {SOLID} or nb == {VELOCITY}) << {d}")
            if inlet:
                emit(f"mov |= np.int32(nb == {VELOCITY}) << {d}")
    emit(f"f0 = {load(f'{off(0)} + n')}")
    for q in range(1, Q):
        src = _offsets(-C[q])
        p = OPP[q]
        if walls:
            emit(f"bw = (wall >> {p}) & 1")
            emit(f"m = np.int32({src}) if bw == 0 else n")
            emit(f"o = {off(p)} if bw == 0 else {off(q)}")
            val = load("o + m")
            term = wall_term(q) if inlet else None
            if term is not None:
                emit(f"f{q} = {val} + ({term} if ((mov >> {p}) & 1) else {lit(0.0)})")
            else:
                emit(f"f{q} = {val}")
        else:
            emit(f"f{q} = {load(f'{off(p)} + np.int32({src})')}")

    def push(q, ind):
        if q == 0:
            store(f"{off(0)} + n", "g0", ind)
            return
        dst = _offsets(C[q])
        if walls:
            emit(f"bw = (wall >> {q}) & 1", ind)
            emit(f"m = np.int32({dst}) if bw == 0 else n", ind)
            emit(f"o = {off(q)} if bw == 0 else {off(OPP[q])}", ind)
            term = wall_term(q) if inlet else None
            if term is not None:
                store("o + m", f"g{q} - ({term} if ((mov >> {q}) & 1) else {lit(0.0)})",
                      ind)
            else:
                store("o + m", f"g{q}", ind)
        else:
            store(f"{off(q)} + np.int32({dst})", f"g{q}", ind)

    if outlet is None:
        collide(push)
    else:  # the stores after the outlet/fluid branch (fewer registers there, ptxas)
        collide(lambda q, ind: None)
        for q in range(Q):
            push(q, 1)
    L.append("")
    return "\n".join(L)


_CACHE: dict = {}


def register_kernels(shape, arith="float32", storage="float32", forced=True, walls=True,
                     inlet=True, outlet=None, fastmath=None, cuda_jit=True, threads=THREADS):
    """``(step_even, step_odd)``: the CUDA kernels of :func:`kernel_source` (compiled on
    first launch, kept per process and specialisation).  Launch as
    ``kernel[(ceil(nz / threads), ny, nx), threads](h_flat, flags, ...)``.
    ``fastmath`` (default: on for float32 arithmetic) lets the compiler fuse
    multiply-adds and use the approximate division; the environment variable
    ``FORESTPY_LBM_MAXREG`` caps the registers per thread (``ptxas --maxrregcount``, to
    try occupancies on a device; default none); ``cuda_jit=False`` returns the plain
    Python functions (for compiling to PTX elsewhere)."""
    outlet = None if outlet is None else tuple(int(v) for v in outlet)
    if fastmath is None:
        fastmath = arith == "float32"
    key = (tuple(int(s) for s in shape), arith, storage, bool(forced), bool(walls),
           bool(inlet), outlet, bool(fastmath), bool(cuda_jit), int(threads))
    if key in _CACHE:
        return _CACHE[key]
    from numba import cuda

    from forestpy.backend import cuda_simulator_enabled
    from forestpy.cuda_device import fast_kernel

    from .fp16 import SCALE

    src = kernel_source(shape, arith, storage, forced, walls, inlet, outlet, threads)
    ftype = getattr(np, arith)
    g = {"cuda": cuda, "np": np, "F": ftype, "U": np.uint32, "H": getattr(np, storage),
         "SCALE": ftype(SCALE), "INV_SCALE": ftype(1.0 / SCALE), "__name__": __name__}
    code = compile(src, f"<forestpy lbm register kernel {key}>", "exec")
    exec(code, g)  # noqa: S102 -- our own generated source
    fns = (g["step_even"], g["step_odd"])
    if cuda_jit:
        opts = {"fastmath": fastmath}
        maxreg = int(os.environ.get("FORESTPY_LBM_MAXREG", "0") or 0)
        if maxreg and not cuda_simulator_enabled():
            opts["max_registers"] = maxreg  # to try other occupancies on a device
        # launched without Numba's per-launch argument typing (forestpy.cuda_device)
        fns = tuple(fast_kernel(cuda.jit(**opts)(f)) for f in fns)
    _CACHE[key] = fns
    return fns


