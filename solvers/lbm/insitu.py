r"""The seed's in-situ compressed-subgrid workflow for the D3Q27 solver (issue 35 item 3):
the grid is held as compressed subgrids in a ring buffer, and each cycle decompresses
one subgrid, fills its ghost layers from uncompressed interface buffers, steps it ``K``
times (temporal blocking), writes its edges to the interface buffers and recompresses
it.  Only one subgrid (plus its ghost layers) is ever decompressed.

>>> from forestpy.solvers.lbm.insitu import InSituLBM
>>> sim = InSituLBM((16, 8, 8), tau=0.8, subgrids=(2, 1, 1), steps_per_cycle=2,
...                 codec="dwt53:tol=1e-9", block=4)
>>> sim.run(4)
>>> round(sim.mass(), 9)
1024.0

**What is stored.**  The distributions as the solver keeps them (``h_q = f_q - w_q``,
the AA pattern's in-place layout of the current step parity), 27 fields per cell, coded
by :class:`forestpy.io.codecs.dwt53_3d.DWT53Blocks` (or copied as they are with the
codec ``none``).  The seed stores its kinetic data ``f_i`` too (its section 3.3: the
subgrid of distributions is decompressed, stepped and recompressed).  Storing density,
velocity and the non-equilibrium part instead is the same number of values (27) unless
the non-equilibrium part is dropped (a regularised scheme), and would put a change of
variables with its own round-off between the codec and the solver: the codec ``none``
could no longer reproduce the plain solver bit for bit, and the per-field exact totals
would no longer be the mass and the momentum.  On ``h`` they are: each block's 27
field totals survive the lossy coding to round-off, so mass and momentum do.

**Ghosts and interfaces.**  Subgrids are equal boxes, ``subgrids = (sx, sy, sz)`` per
axis; an axis with one subgrid is periodic inside the subgrid and has no ghosts.  One
AA step pair moves information two cells (the odd step pulls from ``x - c`` and pushes
to ``x + c``), so ``K`` steps need ghost width ``G = K`` rounded up to even.  After its
``K`` steps a subgrid writes the ``G`` layers next to each of its faces along the split
axes to the interface buffers; its neighbours read them for their ghosts (faces, edges
and corners: a ghost cell lies in one of the owning neighbour's face slabs).  A
subgrid processed later in a sweep must see its neighbours at the time it is at itself:
the seed keeps two sets of interface buffers (read one, write the other, swap); here one
set is kept and a subgrid's new slabs wait as pending copies until the neighbours that
come after it in the sweep (periodic wrap included) have read the old ones -- with one
split axis at most two subgrids' slabs are pending, so the interfaces cost half.

**Consistency with the lossy store.**  The encoder overwrites the stepped subgrid with
its decoded values (``write_back``, the same bits the decoder gives) before the edges are
written: the neighbours see exactly the state this subgrid will resume from.  The
global state after each sweep is therefore one consistent (lossy) LBM state, and the LBM
conserves its mass exactly; the coding conserves every block's field totals; so the
compressed run conserves mass to round-off in a periodic box.

**The ring buffer** (:class:`Ring`) is one byte array: records (one per subgrid and
field chunk) are appended at the head and freed at the tail, first in first out, which
is the order of the sweep.  A subgrid's old record is freed once it is decoded, before
its new one is written.  With ``memory_limit`` its capacity is the limit less the
working set (the decompressed subgrid with ghosts, the codec scratch, the interface
buffers, the flags); a record that does not fit raises :class:`StoreFull` (the seed's
"the lowest compression ratio is the bottleneck").  Without a limit the ring grows.

**Gradual start-up** (``startup=(n, factor)``): the codec's tolerance (``tol`` or
``tau``) starts at ``factor`` times the given one and grows geometrically to it over the
first ``n`` steps.
"""

from __future__ import annotations

import itertools
import math
import os
import time
from collections import deque

import numpy as np

from forestpy.backend import get_backend
from forestpy.io.codecs import CodecError, parse_spec
from forestpy.io.codecs.dwt53_3d import DWT53Blocks, Encoded3D
from forestpy.io.codecs.dwt53_3d import decode as decode3d

from .kernels import CHUNK, SOLID, run_cpu, run_cpu_serial
from .lattice import CS2, Q, W, equilibrium
from .solver import COLLISIONS, KERNELS, MAGIC_TRT

__all__ = ["InSituLBM", "Ring", "StoreFull"]


class StoreFull(MemoryError):
    """The compressed subgrids do not fit the ring buffer (the memory limit)."""


def _align(n: int) -> int:
    return (n + 7) // 8 * 8


class Ring:
    """A first-in first-out ring of records in one byte array ``arena`` (NumPy or CuPy).

    :meth:`alloc` returns the 8-byte aligned offset of ``nbytes`` free bytes after the
    newest record (wrapping to 0 when the end is reached), :meth:`push` makes them the
    newest record, :meth:`pop` frees the oldest.  ``grow``: allocate a larger arena
    (the live records copied, packed from 0) instead of raising :class:`StoreFull`."""

    def __init__(self, xp, capacity: int, grow: bool = False):
        self.xp = xp
        self.capacity = max(int(capacity) // 8 * 8, 8)
        self.arena = xp.empty(self.capacity, np.uint8)
        self.recs: deque = deque()  # [start, size, payload]
        self.grow = grow
        self.live = 0
        self.peak_live = 0

    def _place(self, a: int):
        if not self.recs:
            return 0 if a <= self.capacity else None
        head = self.recs[-1][0] + self.recs[-1][1]
        tail = self.recs[0][0]
        wrapped = self.recs[-1][0] < tail
        if not wrapped:
            if head + a <= self.capacity:
                return head
            return 0 if a <= tail else None
        return head if head + a <= tail else None

    def alloc(self, nbytes: int) -> int:
        a = _align(nbytes)
        start = self._place(a)
        if start is None and self.grow:
            self._regrow(max(2 * self.capacity, self.live + 2 * a))
            start = self._place(a)
        if start is None:
            raise StoreFull(f"the compressed subgrids need more than the ring buffer's "
                            f"{self.capacity} bytes ({self.live} live, {a} more asked): "
                            "raise the memory limit or loosen the tolerance (a gradual "
                            "start-up tightens it at first)")
        return start

    def _regrow(self, capacity: int) -> None:
        new = self.xp.empty(_align(capacity), np.uint8)
        pos = 0
        for rec in self.recs:
            new[pos:pos + rec[1]] = self.arena[rec[0]:rec[0] + rec[1]]
            rec[0] = pos
            pos += rec[1]
        self.arena = new
        self.capacity = int(new.size)

    def push(self, start: int, nbytes: int, payload) -> None:
        a = _align(nbytes)
        self.recs.append([start, a, payload])
        self.live += a
        self.peak_live = max(self.peak_live, self.live)

    def pop(self):
        start, a, payload = self.recs.popleft()
        self.live -= a
        return start, payload

    def view(self, start: int, count: int, dtype):
        dtype = np.dtype(dtype)
        return self.arena[start:start + count * dtype.itemsize].view(dtype)

    def records(self):
        """``(start, payload)`` of the live records, oldest first."""
        return [(r[0], r[2]) for r in self.recs]


def _region(fn_or_array, ix, iy, iz, what):
    """``fn(x, y, z)`` on the open index grids, or the array at those indices."""
    if callable(fn_or_array):
        return fn_or_array(ix[:, None, None], iy[None, :, None], iz[None, None, :])
    a = np.asarray(fn_or_array)
    if a.ndim == 0:
        return a
    if what == "u":
        return a[:, ix[:, None, None], iy[None, :, None], iz[None, None, :]]
    return a[ix[:, None, None], iy[None, :, None], iz[None, None, :]]


class InSituLBM:
    """The D3Q27 solver (:class:`~forestpy.solvers.lbm.LBM`'s kernels) on compressed
    subgrids (see the module docstring).

    Parameters as :class:`~forestpy.solvers.lbm.LBM` for ``shape, tau, collision, magic,
    force, dtype, backend``; every side is periodic, no inlet or outlet.

    solid : None, bool array of ``shape``, or ``f(x, y, z) -> bool array``
        Solid cells (a function is called on the open index grids of a region).
    rho, u : number / 3 numbers, arrays, or functions of ``(x, y, z)``
        Initial density and velocity (``u`` returns shape ``(3, ...)``).
    state : array ``(27, nx, ny, nz)`` or None
        Initial ``h`` instead (e.g. :meth:`LBM.raw` of a plain run at ``t = 0``).
    subgrids : 3 integers
        Subgrids per axis (each must divide the axis).
    steps_per_cycle : int
        ``K``, steps per decompress-step-compress cycle (ghost width ``K`` rounded up
        to even).
    codec : ``"none"`` or ``"dwt53:tol=...|tau=...[,levels=..][,tries=..]"``
        ``tol`` an absolute L-infinity bound on ``h``, one for every field.
    block : int or 3 ints
        Codec block edges (powers of two dividing the subgrid).
    chunk : int or None
        Fields coded per call (default 9; the codec scratch is 1.4 float64 per cell and
        field of a chunk: 1 for the least memory, 27 for the fewest launches).
    startup : None or ``(steps, factor)``
        Gradual start-up of the tolerance.
    memory_limit : bytes or None
        The ring's capacity is the limit less the working set.
    kernel : "cell", "register" or None
        The GPU step kernel, as for :class:`~forestpy.solvers.lbm.LBM` (default the
        environment variable ``FORESTPY_LBM_KERNEL``, else ``"cell"``; the CPU always
        runs the cell kernel).  ``"register"``: the kernels of :mod:`.fast` generated
        for the subgrid-with-ghosts shape (one shape for every subgrid; compiled once per
        process and shape).
    arith : "float32", "float64" or None
        The register kernel's working precision (default float64 for float64 storage,
        float32 for float32 storage).
    """

    def __init__(self, shape, tau, collision="bgk", magic=MAGIC_TRT, force=(0.0, 0.0, 0.0),
                 solid=None, rho=1.0, u=None, state=None, dtype="float64", backend="cpu",
                 subgrids=(2, 1, 1), steps_per_cycle=2, codec="none", block=8, chunk=None,
                 startup=None, memory_limit=None, kernel=None, arith=None):
        shape = tuple(int(s) for s in np.atleast_1d(shape))
        if len(shape) != 3 or min(shape) < 1:
            raise ValueError(f"shape must be three positive cell counts, got {shape}")
        tau = float(tau)
        if not tau > 0.5:
            raise ValueError(f"tau must be > 1/2 (positive viscosity), got {tau}")
        if collision not in COLLISIONS:
            raise ValueError(f"unknown collision {collision!r}; valid: {COLLISIONS}")
        self.force = np.asarray(force, dtype=np.float64)
        if self.force.shape != (3,) or not np.all(np.isfinite(self.force)):
            raise ValueError(f"force must be three finite numbers, got {force!r}")
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.float32, np.float64):
            raise ValueError(f"dtype must be float32 or float64, got {self.dtype.name}")
        self.shape, self.tau, self.collision = shape, tau, collision
        self.omega_plus = 1.0 / tau
        self.omega_minus = (self.omega_plus if collision == "bgk"
                            else 1.0 / (float(magic) / (tau - 0.5) + 0.5))
        nsub = tuple(int(s) for s in np.atleast_1d(subgrids))
        if len(nsub) != 3 or min(nsub) < 1 or any(n % s for n, s in zip(shape, nsub)):
            raise ValueError(f"subgrids must be three counts dividing the grid {shape}, "
                             f"got {subgrids}")
        K = int(steps_per_cycle)
        if K < 1:
            raise ValueError(f"steps_per_cycle must be >= 1, got {steps_per_cycle}")
        self.K = K
        self.G = K + (K & 1)
        self.nsub = nsub
        self.split = [a for a in range(3) if nsub[a] > 1]
        self.sub = tuple(n // s for n, s in zip(shape, nsub))
        for a in self.split:
            if self.sub[a] < self.G:
                raise ValueError(f"subgrids of {self.sub[a]} cells along axis {a} are "
                                 f"thinner than the ghost width {self.G} "
                                 f"(steps_per_cycle={K})")
        G = self.G
        self.ext = tuple(s + 2 * G if a in self.split else s for a, s in enumerate(self.sub))
        self.off = tuple(G if a in self.split else 0 for a in range(3))
        self.backend = get_backend(backend)
        xp = self.xp = self.backend.xp
        self.kernel, self.arith = self._choose_kernel(kernel, arith)
        # codec
        name, params = parse_spec(codec) if isinstance(codec, str) else (None, None)
        if name not in ("none", "dwt53"):
            raise CodecError(f"in-situ codec must be 'none' or 'dwt53:...', got {codec!r}")
        self.codec_name = name
        self.codec_spec = codec
        if name == "dwt53":
            unknown = set(params) - {"tol", "tau", "levels", "tries"}
            if unknown:
                raise CodecError(f"in-situ dwt53: unknown parameter(s) {sorted(unknown)}; "
                                 "valid: tol, tau, levels, tries")
            self._tol = float(params["tol"]) if "tol" in params else None
            self._tau = float(params.get("tau", 0.0))
            self._levels = int(params["levels"]) if "levels" in params else None
            self._tries = int(params.get("tries", 8))
            self._codec = self._make_codec(1.0, block)  # checks block, levels
            for a in range(3):
                if self.sub[a] % self._codec.block[a]:
                    raise ValueError(f"the subgrid edge {self.sub[a]} along axis {a} is "
                                     f"not a multiple of the codec block {self._codec.block}")
            self.block = self._codec.block
        else:
            self.block = None
        if name == "none":
            chunk = Q
        chunk = 9 if chunk is None else int(chunk)
        if not 1 <= chunk <= Q:
            raise ValueError(f"chunk must be in 1..27, got {chunk}")
        self.chunks = [(m, min(Q, m + chunk)) for m in range(0, Q, chunk)]
        if startup is not None:
            n, factor = startup
            if not (int(n) >= 1 and 0 < float(factor) <= 1):
                raise ValueError(f"startup must be (steps >= 1, 0 < factor <= 1), got "
                                 f"{startup!r}")
            startup = (int(n), float(factor))
        self.startup = startup
        # solid cells, initial state
        if solid is not None and not callable(solid):
            solid = np.asarray(solid, dtype=bool)
            if solid.shape != shape:
                raise ValueError(f"solid must have the grid's shape {shape}, got "
                                 f"{solid.shape}")
        self._solid = solid
        if state is not None:
            state = np.asarray(state)
            if state.shape != (Q, *shape):
                raise ValueError(f"state must have shape {(Q, *shape)}, got {state.shape}")
        # buffers
        self.ncell_ext = int(np.prod(self.ext))
        self.E = xp.zeros((Q, self.ncell_ext), self.dtype)
        self.E4 = self.E.reshape(Q, *self.ext)
        self.interior = (slice(None),) + tuple(slice(o, o + s) for o, s in zip(self.off,
                                                                            self.sub))
        self.nsubgrids = int(np.prod(nsub))
        self._slab_shapes = [(2, Q) + tuple(G if b == a else self.sub[b] for b in range(3))
                             for a in self.split]
        self._slabs = [xp.zeros((self.nsubgrids, *shape), self.dtype)
                       for shape in self._slab_shapes]
        self._plan_ghosts()
        self._plan_commits()
        self._flags = {}
        self._zero_flags = None
        for s in range(self.nsubgrids):
            self._flags_of(s)
        self.t = 0
        self.timings = {"lbm": 0.0, "compress": 0.0, "decompress": 0.0, "sync": 0.0}
        self.ratio_history = []
        self.memory_limit = None if memory_limit is None else int(memory_limit)
        itemsize = self.dtype.itemsize
        self.state_bytes = Q * int(np.prod(shape)) * itemsize
        work = self.working_bytes()
        if self.memory_limit is not None:
            capacity = self.memory_limit - work
            if capacity <= 0:
                raise StoreFull(f"the working set ({work} bytes: a subgrid with ghosts, "
                                f"codec scratch, interface buffers, flags) alone exceeds the "
                                f"memory limit of {self.memory_limit} bytes")
            self.ring = Ring(xp, capacity, grow=False)
        else:
            sub_bytes = Q * int(np.prod(self.sub)) * itemsize
            self.ring = Ring(xp, self.state_bytes + 2 * sub_bytes, grow=True)
        # fill the store
        for s in range(self.nsubgrids):
            self._init_subgrid(s, rho, u, state)
            self._compress(s)
            self._write_slabs(s)
        self.ratio_history.append((0, self.ratio))

    # ------------------------------------------------------------------ set-up
    def _choose_kernel(self, kernel, arith):
        """``(kernel, arith)`` checked as :class:`~forestpy.solvers.lbm.LBM` checks them;
        the register kernel must index the subgrid with ghosts."""
        if kernel is None:
            kernel = (os.environ.get("FORESTPY_LBM_KERNEL", "cell") if self.backend.is_gpu
                      else "cell")
        if kernel not in KERNELS:
            raise ValueError(f"unknown kernel {kernel!r}; valid: {KERNELS}")
        if kernel == "register" and not self.backend.is_gpu:
            raise ValueError("the register kernel runs on the GPU backend only")
        if arith is None:
            arith = "float64" if self.dtype == np.float64 else "float32"
        if arith not in ("float32", "float64"):
            raise ValueError(f"arith must be float32 or float64, got {arith!r}")
        if kernel == "register":
            from .fast import check_shape

            check_shape(self.ext)
            return kernel, arith
        return kernel, "float64"

    def _make_codec(self, scale, block=None):
        tol = None if self._tol is None else self._tol * scale
        return DWT53Blocks(tau=self._tau * scale, tol=tol,
                           block=self.block if block is None else block,
                           levels=self._levels, tries=self._tries)

    def _index(self, s):
        return np.unravel_index(s, self.nsub)

    def _ranges(self, s, ghost=True):
        """Global cell indices (wrapped) of subgrid ``s``'s extended (or interior) box."""
        idx = self._index(s)
        out = []
        for a in range(3):
            lo = idx[a] * self.sub[a]
            if ghost and a in self.split:
                out.append((lo - self.G + np.arange(self.ext[a])) % self.shape[a])
            else:
                out.append(lo + np.arange(self.sub[a]))
        return out

    def _flags_of(self, s):
        if self._solid is None:
            if self._zero_flags is None:
                self._zero_flags = self.xp.zeros(self.ncell_ext, np.uint8)
            return self._zero_flags
        if s not in self._flags:
            ix, iy, iz = self._ranges(s)
            solid = np.broadcast_to(_region(self._solid, ix, iy, iz, "solid"), self.ext)
            if not solid.any():  # no wall here: the shared zero flags
                if self._zero_flags is None:
                    self._zero_flags = self.xp.zeros(self.ncell_ext, np.uint8)
                self._flags[s] = self._zero_flags
            else:
                flags = np.where(solid, SOLID, 0).astype(np.uint8).reshape(-1)
                self._flags[s] = self.backend.to_device(flags)
        return self._flags[s]

    def _init_subgrid(self, s, rho, u, state):
        ix, iy, iz = self._ranges(s, ghost=False)
        if state is not None:
            h = state[:, ix[:, None, None], iy[None, :, None], iz[None, None, :]]
        else:
            r = np.broadcast_to(np.asarray(_region(rho, ix, iy, iz, "rho"), np.float64),
                                self.sub)
            if u is None:
                v = np.zeros((3, *self.sub))
            elif callable(u) or np.ndim(u) > 1:
                v = np.broadcast_to(np.asarray(_region(u, ix, iy, iz, "u"), np.float64),
                                    (3, *self.sub))
            else:
                v = np.broadcast_to(np.asarray(u, np.float64).reshape(3, 1, 1, 1),
                                    (3, *self.sub))
            h = equilibrium(r, v) - W.reshape(Q, 1, 1, 1)
            if self._solid is not None:
                solid = np.broadcast_to(_region(self._solid, ix, iy, iz, "solid"), self.sub)
                h[:, solid] = 0.0
        self.E4[self.interior] = self.backend.to_device(np.ascontiguousarray(h, self.dtype))

    def _plan_ghosts(self):
        """The ghost regions: for each neighbour offset ``d`` (over the split axes), the
        slab (axis, side) it comes from and the source and destination slices."""
        G = self.G
        plan = []
        choices = [(-1, 0, 1) if a in self.split else (0,) for a in range(3)]
        for d in itertools.product(*choices):
            if not any(d):
                continue
            a = next(b for b in range(3) if d[b])
            side = 1 if d[a] == -1 else 0
            src, dst = [slice(None)], [slice(None)]
            for b in range(3):
                s = self.sub[b]
                if b not in self.split:
                    src.append(slice(None))
                    dst.append(slice(None))
                    continue
                src.append(slice(None) if b == a else
                           (slice(s - G, s) if d[b] == -1 else
                            slice(0, G) if d[b] == 1 else slice(None)))
                dst.append(slice(0, G) if d[b] == -1 else
                           slice(G + s, 2 * G + s) if d[b] == 1 else slice(G, G + s))
            plan.append((d, self.split.index(a), side, tuple(src), tuple(dst)))
        self._ghost_plan = plan
        slabs = []
        for ia, a in enumerate(self.split):
            lo, hi = [slice(None)], [slice(None)]
            for b in range(3):
                o, s = self.off[b], self.sub[b]
                if b == a:
                    lo.append(slice(G, 2 * G))
                    hi.append(slice(s, s + G))
                else:
                    lo.append(slice(o, o + s))
                    hi.append(slice(o, o + s))
            slabs.append((ia, tuple(lo), tuple(hi)))
        self._slab_plan = slabs

    def working_bytes(self) -> int:
        """Bytes held besides the ring: the decompressed subgrid with ghosts, the codec
        scratch (float64 coefficients and per-field metadata of one chunk), the
        interface slabs with the most pending copies at once, and the flags."""
        item = self.dtype.itemsize
        e = Q * self.ncell_ext * item
        scratch = 0
        if self.codec_name == "dwt53":
            bx, by, bz = self.block
            nblock = int(np.prod(self.sub)) // (bx * by * bz)
            width = max(m1 - m0 for m0, m1 in self.chunks)
            scratch = nblock * width * ((bx + 1) * (by + 1) * (bz + 1) * 8 + 40)
        per_sub = sum(int(np.prod(shape)) for shape in self._slab_shapes) * item
        slabs = per_sub * (self.nsubgrids + self.max_pending)
        flags = (self.ncell_ext * (1 if self._solid is None else len(self._flags) or 1))
        return e + scratch + slabs + flags

    # ------------------------------------------------------------------ pieces
    def _scale(self):
        if self.startup is None:
            return 1.0
        n, factor = self.startup
        return factor ** max(0.0, 1.0 - self.t / n)

    def _compress(self, s):
        """Encode subgrid ``s`` from the work buffer into the ring (with write-back)."""
        x = self.E4[self.interior]
        if self.codec_name == "none":
            nbytes = Q * int(np.prod(self.sub)) * self.dtype.itemsize
            start = self.ring.alloc(nbytes)
            view = self.ring.view(start, Q * int(np.prod(self.sub)), self.dtype)
            view.reshape(Q, *self.sub)[...] = x
            self.ring.push(start, nbytes, None)
            return
        codec = self._make_codec(self._scale())
        for m0, m1 in self.chunks:
            holder = {}

            def alloc(nf, nb, holder=holder):
                start = self.ring.alloc(8 * nf + nb)
                holder["start"] = start
                return (self.ring.view(start, nf, np.float64),
                        self.ring.view(start + 8 * nf, nb, np.uint8))

            enc = codec.encode(x[m0:m1], write_back=True, device=self.backend.is_gpu,
                               alloc=alloc)
            nf, nb = int(enc.foff[-1]), int(enc.boff[-1])
            meta = (enc.foff, enc.boff, enc.shape, enc.dtype, enc.block, enc.nlev, nf, nb)
            self.ring.push(holder["start"], 8 * nf + nb, meta)

    def _decode_record(self, start, meta, out):
        foff, boff, shape, dtype, block, nlev, nf, nb = meta
        enc = Encoded3D(self.ring.view(start, nf, np.float64),
                        self.ring.view(start + 8 * nf, nb, np.uint8), foff, boff, shape,
                        dtype, block, nlev, None)
        decode3d(enc, out, device=self.backend.is_gpu)

    def _decompress(self, s, pop=True, out=None):
        """Subgrid ``s``'s record(s) (the oldest in the ring) into ``out`` (default the
        work buffer's interior); freed when ``pop``."""
        x = self.E4[self.interior] if out is None else out
        if pop:
            recs = [self.ring.recs[i] for i in range(len(self.chunks))]
        else:
            n = len(self.chunks)
            recs = list(self.ring.recs)[s * n:(s + 1) * n]
        for (m0, m1), (start, _size, meta) in zip(self.chunks, recs):
            if meta is None:
                x[...] = self.ring.view(start, Q * int(np.prod(self.sub)),
                                        self.dtype).reshape(Q, *self.sub)
            else:
                self._decode_record(start, meta, x[m0:m1])
        if pop:
            for _ in self.chunks:
                self.ring.pop()

    def _fill_ghosts(self, s):
        idx = self._index(s)
        slabs = self._slabs
        for d, ia, side, src, dst in self._ghost_plan:
            nb = np.ravel_multi_index(tuple((i + di) % n for i, di, n in
                                            zip(idx, d, self.nsub)), self.nsub)
            self.E4[dst] = slabs[ia][nb, side][src]

    def _write_slabs(self, s, pending=False):
        """Subgrid ``s``'s edge layers to its interface slabs, or (``pending``) to a
        pending copy that :meth:`_commit` moves there once every neighbour processed
        later in the sweep has read the old ones."""
        if pending and self._later[s]:
            self._pending[s] = ([self.E4[lo].copy() for _, lo, _ in self._slab_plan],
                                [self.E4[hi].copy() for _, _, hi in self._slab_plan],
                                set(self._later[s]))
            return
        for ia, lo, hi in self._slab_plan:
            self._slabs[ia][s, 0] = self.E4[lo]
            self._slabs[ia][s, 1] = self.E4[hi]

    def _commit(self, n):
        """Subgrid ``n`` has filled its ghosts: commit the pending slabs that waited
        for it."""
        for p in list(self._pending):
            lows, highs, waiting = self._pending[p]
            waiting.discard(n)
            if not waiting:
                for ia in range(len(self._slab_plan)):
                    self._slabs[ia][p, 0] = lows[ia]
                    self._slabs[ia][p, 1] = highs[ia]
                del self._pending[p]

    def _neighbours(self, s):
        idx = self._index(s)
        return {int(np.ravel_multi_index(tuple((i + di) % n for i, di, n in
                                               zip(idx, d, self.nsub)), self.nsub))
                for d, *_ in self._ghost_plan}

    def _plan_commits(self):
        """One set of interface slabs (the seed keeps two): a subgrid's new slabs wait,
        as pending copies, until its neighbours that come later in the sweep (those that
        still need the old ones, periodic wrap included) have filled their ghosts.
        ``max_pending``: the most pending copies at once (counted in the memory)."""
        self._pending = {}
        self._later = [{n for n in self._neighbours(s) if n > s}
                       for s in range(self.nsubgrids)]
        live, peak = {}, 0
        for s in range(self.nsubgrids):
            for p in list(live):
                live[p].discard(s)
                if not live[p]:
                    del live[p]
            if self._later[s]:
                live[s] = set(self._later[s])
            peak = max(peak, len(live))
        self.max_pending = peak

    def _step(self, s):
        args = (self.omega_plus, self.omega_minus, *map(float, self.force),
                1.0, 0.0, 0.0, 0.0, 1.0, 0, 0, 0)
        ex, ey, ez = self.ext
        flags = self._flags_of(s)
        if self.backend.is_gpu and self.kernel == "register":
            self._step_register(flags, args)
        elif self.backend.is_gpu:
            from .gpu import THREADS, gpu_step_kernel

            kernel = gpu_step_kernel()
            blocks = (self.ncell_ext + THREADS - 1) // THREADS
            for k in range(self.K):
                kernel[blocks, THREADS](self.E, flags, ex, ey, ez, (self.t + k) & 1, *args)
        else:
            run = run_cpu_serial if self.ncell_ext <= CHUNK else run_cpu
            run(self.E, flags, ex, ey, ez, self.t, self.K, *args)

    def _step_register(self, flags, args):
        """``K`` steps of the work buffer with the register kernels of :mod:`.fast`,
        generated for the subgrid-with-ghosts shape (the same for every subgrid; periodic
        inside it as the cell kernel is: the wrapped values only reach ghost cells that
        the next cycle refills).  Subgrids without solid cells share the zero flags and
        the kernels that read none."""
        from forestpy.cuda_device import launch_kernel

        from . import fast

        ex, ey, ez = self.ext
        threads = fast.THREADS
        walls = flags is not self._zero_flags
        even, odd = fast.register_kernels(self.ext, self.arith, self.dtype.name,
                                          forced=bool(np.any(self.force)), walls=walls,
                                          inlet=False, outlet=None, threads=threads)
        h = self.E.reshape(-1)
        grid = ((ez + threads - 1) // threads, ey, ex)
        for k in range(self.K):
            launch_kernel(odd if (self.t + k) & 1 else even, grid, threads, 0, h, flags,
                          *args[:10])

    def _tick(self, key, t0):
        self.backend.synchronize()
        t1 = time.perf_counter()
        self.timings[key] += t1 - t0
        return t1

    # ------------------------------------------------------------------ public
    def run(self, steps: int) -> None:
        """Advance ``steps`` steps (a multiple of ``steps_per_cycle``)."""
        steps = int(steps)
        if steps < 0 or steps % self.K:
            raise ValueError(f"steps must be a non-negative multiple of steps_per_cycle="
                             f"{self.K}, got {steps}")
        for _ in range(steps // self.K):
            for s in range(self.nsubgrids):
                t0 = time.perf_counter()
                self._decompress(s)
                t0 = self._tick("decompress", t0)
                self._fill_ghosts(s)
                self._commit(s)
                t0 = self._tick("sync", t0)
                self._step(s)
                t0 = self._tick("lbm", t0)
                self._compress(s)
                t0 = self._tick("compress", t0)
                self._write_slabs(s, pending=True)
                self._tick("sync", t0)
            assert not self._pending
            self.t += self.K
            self.ratio_history.append((self.t, self.ratio))

    @property
    def stored_bytes(self) -> int:
        """Live bytes of the ring plus the per-block offset tables (host)."""
        index = sum(16 * r[2][0].size for r in self.ring.recs if r[2] is not None)
        return self.ring.live + index

    @property
    def ratio(self) -> float:
        """Uncompressed state bytes over :attr:`stored_bytes`."""
        return self.state_bytes / max(self.stored_bytes, 1)

    def memory(self) -> dict:
        """Resident bytes: ``store`` (the ring's capacity), ``store_peak_live``,
        ``working`` (:meth:`working_bytes`), ``peak_resident`` (``store + working``),
        ``uncompressed`` (the full state in the storage type) and ``limit``."""
        work = self.working_bytes()
        return {"store": self.ring.capacity, "store_peak_live": self.ring.peak_live,
                "working": work, "peak_resident": self.ring.capacity + work,
                "uncompressed": self.state_bytes, "limit": self.memory_limit}

    def state(self) -> np.ndarray:
        """The full stored ``h`` (27, nx, ny, nz) on the host, decoded (small grids)."""
        out = np.empty((Q, *self.shape), self.dtype)
        buf = self.xp.empty((Q, *self.sub), self.dtype)
        for s in range(self.nsubgrids):
            self._decompress(s, pop=False, out=buf)
            ix, iy, iz = self._ranges(s, ghost=False)
            out[:, ix[0]:ix[-1] + 1, iy[0]:iy[-1] + 1, iz[0]:iz[-1] + 1] = \
                self.backend.to_host(buf)
        return out

    def _fluid(self, s):
        if self._solid is None:
            return None
        ix, iy, iz = self._ranges(s, ghost=False)
        return ~np.broadcast_to(_region(self._solid, ix, iy, iz, "solid"), self.sub)

    def mass(self) -> float:
        """Total mass of the fluid cells, ``sum (h + w)``, summed exactly
        (``math.fsum``) subgrid by subgrid.  It does not depend on the AA layout's
        parity: a collision conserves it."""
        buf = self.xp.empty((Q, *self.sub), self.dtype)
        parts = []
        for s in range(self.nsubgrids):
            self._decompress(s, pop=False, out=buf)
            h = np.asarray(self.backend.to_host(buf), np.float64)
            fluid = self._fluid(s)
            cells = h if fluid is None else h[:, fluid]
            parts.append(math.fsum(cells.ravel()))
            parts.append(float(cells[0].size))
        return math.fsum(parts)

    def snapshot(self):
        """A CPU :class:`~forestpy.solvers.lbm.LBM` holding the decoded state at step
        ``t`` (its ``density()``, ``velocity()``, ``force_on()``; small grids)."""
        from .solver import LBM

        solid = None
        if self._solid is not None:
            ix, iy, iz = (np.arange(n) for n in self.shape)
            solid = np.broadcast_to(_region(self._solid, ix, iy, iz, "solid"), self.shape)
        sim = LBM(self.shape, self.tau, collision=self.collision,
                  magic=(1 / self.omega_minus - 0.5) * (self.tau - 0.5),
                  force=self.force, solid=solid, dtype=self.dtype, backend="cpu")
        sim._h[...] = self.state().reshape(Q, -1)
        sim.t = self.t
        return sim

    def density(self) -> np.ndarray:
        """Density (nx, ny, nz), float64 on the host; solid cells 1.  At even ``t`` (the
        natural layout) ``1 + sum_q h_q`` subgrid by subgrid on the backend, else
        through :meth:`snapshot`."""
        if self.t % 2:
            return self.snapshot().density()
        out = np.empty(self.shape)
        buf = self.xp.empty((Q, *self.sub), self.dtype)
        for s in range(self.nsubgrids):
            self._decompress(s, pop=False, out=buf)
            ix, iy, iz = self._ranges(s, ghost=False)
            rho = 1.0 + buf.sum(axis=0, dtype=np.float64)
            out[ix[0]:ix[-1] + 1, iy[0]:iy[-1] + 1, iz[0]:iz[-1] + 1] = \
                self.backend.to_host(rho)
        return out

    @property
    def viscosity(self) -> float:
        return CS2 * (self.tau - 0.5)


def nmse(ref, test) -> float:
    """The seed's normalised error ``sqrt(sum (ref - test)^2) / sqrt(sum ref^2)``
    (its eq. 19)."""
    ref = np.asarray(ref, np.float64)
    test = np.asarray(test, np.float64)
    return math.sqrt(float(((ref - test) ** 2).sum()) / float((ref ** 2).sum()))
