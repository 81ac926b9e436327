"""The wave-propagation step on the GPU, second kernel: a whole patch per block (Numba-CUDA).

Same algorithm, same operations in the same order as the CPU kernel
(:mod:`.step_kernel`) and the row-tile kernel (:mod:`.gpu_kernel`), so the three agree
bit for bit when the GPU does not contract multiply-adds.  What changes against the
row-tile kernel (``docs/gpu_kernel.md`` gives the reasons and the compiler's numbers):

* **Whole patches.**  A block steps one patch; the rows of a patch are split into
  tiles only when the per-face scratch would not fit ``shared_bytes`` (48 KB of static
  shared memory: shallow water at ``mx = 16`` is one tile, ``mx = 32`` five tiles of
  7 rows instead of six of 6), and then each tile is a block of its own (a loop over
  tiles in one block makes the compiler keep about twice the registers).  No face is
  solved twice at ``mx <= 16``.
* **Per-face state in shared memory, not registers.**  Each pass (x, then y) has four
  phases, one barrier after each:

  1. one thread per face: ``rpn2``; the waves to shared memory (``W``), ``amdq`` and
     ``apdq`` to the face's record ``F`` (a region apart from ``W``); the speeds stay
     in the thread's registers until phase 2;
  2. one thread per limited face: Courant number, limiter from its own and the
     neighbouring faces' waves, second-order correction ``cq`` to ``F``;
  3. one thread per cell of the pass (interior cells and the halo lines the
     transverse terms reach): the two transverse splittings that enter the cell
     (``rpt2`` of the right-going part of its lower face and of the left-going part
     of its upper face), summed into the cell's ``tlo``/``thi`` (region ``T``, over
     the dead ``W``);
  4. one thread per interior cell: gathers its two faces' normal fluxes from ``F``
     and the neighbouring cells' transverse sums from ``T``.

  Nothing but the speeds of phase 1 and the cell's four partial edge fluxes between
  the passes lives in registers across a barrier, so the register budget is the
  Riemann solver's own.  7 barriers per tile and 1 in the epilogue (the row-tile
  kernel: 8 per tile of 8 rows and 9 for its reduction).
* **Flat indexing.**  ``q``, ``aux``, ``qnew`` and ``edge_out`` are passed as flat
  views; the strides inside a patch are compile-time constants (one base offset per
  patch), not the 64-bit stride arithmetic of 4-D array views.
* **Warp-shuffle reductions.**  The Courant number is reduced by ``shfl_down_sync``
  in each warp and one shared slot per warp.
* **Fused status.**  With ``status=True`` the epilogue also writes the per-patch row
  of :func:`forestpy.patches.status.patch_status` for the new state (sum of the
  interior values, smallest value of each positive component), with that kernel's
  summation order, so the row is bitwise the status kernel's.

Physics: the Riemann solver's pointwise ``rpn2``/``rpt2``, compiled as device functions
from the CPU source (:func:`forestpy.cuda_device.cuda_device`).  A solver with the
work-sharing pieces of :mod:`forestpy.vtable` (``cell_state``, ``edge_state``,
``rpn2e``, ``rpt2e``) has them called instead, as the CPU kernel does (default; not
with ``work_sharing=False`` or ``FORESTPY_WORK_SHARING=0``):

* **phase 0** (one barrier more per block; ``cell_states``): one thread per cell of
  the tile and its halo (rows ``j0-2 .. j0+rt+1``, columns ``-2 .. mx+1``) computes
  the cell's state once for the whole step, into a region ``C`` after ``F`` that
  both passes read.  Where ``C`` would make the tiles smaller (more thread-slots per
  patch), the cell states are computed in the threads instead: two per face thread,
  three per cell thread of phase 3 (those the transverse solver does not read are
  dead code the compiler drops);
* phase 1 computes the face's state (``edge_state``) once from the two cell states
  and calls ``rpn2e``; the face state goes into the face's record in ``F`` after
  ``amdq``/``apdq``/``cq`` (``num_edge_state`` doubles more per record, only with
  transverse terms);
* phase 3 calls ``rpt2e`` with the stored state of each of the cell's two faces and
  the cell states, instead of ``rpt2`` recomputing them (the Roe averages).

The larger scratch changes the tiling: shallow water (Roe) at ``mx = 16`` no longer
fits one tile in 48 KB and is stepped in two blocks of 9 and 7 rows (224 threads, ``C``
in shared memory); at ``mx = 32`` in seven blocks of 5 rows (288 threads, cell states
in the threads).  The solver-independent parts (limiter, sums, gathers) are
unchanged, and the pieces get the CPU kernel's arguments (each cell's state from its
own ``q`` and ``aux``, float64 rows), so the results stay the CPU kernel's bit for bit.
"""

from __future__ import annotations

import math

from numba import cuda, float64, int32

from forestpy.cuda_device import cuda_device, fast_kernel
from forestpy.step_params import device_scalar, dt_argument

from .limiters import limiter_apply

__all__ = ["plan_patch", "make_gpu_patch_kernel", "PatchStepKernel", "SHARED_BYTES"]

#: static shared memory a block may use (48 KB, less a little for the reductions)
SHARED_BYTES = 47 * 1024
MAX_THREADS = 1024
#: threads of the status kernel (forestpy.patches.status._THREADS): the fused status
#: sums in its order
STATUS_LANES = 128
_KERNELS: dict = {}


def _pass_sizes(ixy, mx, R):
    """``(lines, faces per line)`` of the pass in direction ``ixy`` over a tile of ``R``
    rows: x faces of rows ``j0-1 .. j0+R`` (``mx + 3`` each), y faces of columns
    ``-1 .. mx`` (``R + 3`` each)."""
    return (R + 2, mx + 3) if ixy == 1 else (mx + 2, R + 3)


def plan_patch(mx: int, my: int, meqn: int, mwaves: int, order: int = 2,
               transverse: bool = True, shared_bytes: int = SHARED_BYTES,
               max_threads: int = MAX_THREADS, rows: int | None = None,
               status_cols: int = 0, cell_state: int = 0, edge_state: int = 0):
    """Rows per tile ``R``, threads per block and the sizes (in doubles) of the shared
    regions ``A`` (waves, then transverse sums) and ``F`` (face records, then the cell
    states of the work-sharing contract) for a patch shape.  The fewest thread-slots per
    patch (threads times tiles) among the ``R`` whose scratch fits ``shared_bytes`` and
    whose faces fit ``max_threads`` threads, the largest ``R`` on a tie; ``rows``
    forces ``R``; ``status_cols`` the columns of a fused status.  ``cell_state``: the
    doubles of one cell's state (a region of ``(R + 4) (mx + 4)`` cells after the face
    records), ``edge_state``: the doubles of one face's state, kept in the face's record
    when there are transverse terms.  Returns ``(R, nthreads, nA, nF)``."""
    frec = (3 if order == 2 else 2) * meqn + (edge_state if transverse else 0)
    best = None
    for R in range(1, my + 1):
        need_t = 0
        nF = 0
        for ixy in (1, 2):
            NL, NN = _pass_sizes(ixy, mx, R)
            need_t = max(need_t, NL * NN, NL * (NN - 3))
            nF = max(nF, NL * (NN - 2) * frec)
        nF += cell_state * (R + 4) * (mx + 4)
        nt = -(-need_t // 32) * 32
        # A: a face's waves, then a cell's two transverse sums, at stride nt; at the
        # end the status lanes
        nA = max(nt * meqn * mwaves, nt * 2 * meqn if transverse else 0,
                 status_cols * STATUS_LANES)
        if nt > max_threads or (nA + nF) * 8 > shared_bytes:
            continue
        cost = nt * (-(-my // R))
        if rows is not None:
            cost = abs(R - rows)
        if best is None or cost <= best[0]:
            best = (cost, R, nt, nA, nF)
    if best is None:
        raise ValueError(
            f"patch {mx}x{my} with {meqn} equations and {mwaves} waves does not fit one "
            f"tile row in {shared_bytes} bytes of shared memory"
        )
    return best[1:]


class PatchStepKernel:
    """The compiled patch kernel with its launch: ``kernel(rows, q, aux, qnew, dx, dy,
    dt, params, limiter_codes, cfl_out, edge_out, status_out=None)`` with the arguments
    of :func:`.gpu_kernel.make_gpu_step_kernel`'s kernel (the arrays C-contiguous);
    ``status_out`` ``(npatch, 1 + len(positive))`` float64, required when built with
    ``status=True``.  ``nthreads``, ``rows_per_tile``, ``tiles`` (blocks per patch),
    ``shared_doubles``, ``record_doubles`` (doubles per face record in ``F``),
    ``cell_state_doubles`` (the cell-state region ``C``, 0 without work sharing),
    ``max_registers`` (the register cap compiled for), ``work_sharing`` (whether
    the solver's work-sharing pieces are called) and ``cell_states`` (whether the cell
    states are computed once into ``C``) describe the launch.

    A patch of several row tiles is stepped by one block per tile (a loop over tiles
    inside one block makes the compiler keep twice the registers); the last block of a
    patch to finish writes its Courant number (and status) from the tiles' (a ticket
    per patch, in scratch arrays this object keeps per patch count)."""

    def __init__(self, kernel, nthreads, rows_per_tile, tiles, shared_doubles, status, *,
                 record_doubles=0, cell_state_doubles=0, max_registers=None,
                 work_sharing=False, cell_states=False):
        self.kernel = kernel
        self.nthreads = nthreads
        self.rows_per_tile = rows_per_tile
        self.tiles = tiles
        self.shared_doubles = shared_doubles
        self.status = status
        self.record_doubles = record_doubles
        self.cell_state_doubles = cell_state_doubles
        self.max_registers = max_registers
        self.work_sharing = work_sharing
        self.cell_states = cell_states
        self._scratch: dict = {}

    def _tile_scratch(self, q):
        from forestpy.backend import array_module

        xp = array_module(q)
        key = (q.shape[0], xp.__name__)
        got = self._scratch.get(key)
        if got is None:
            self._scratch.clear()
            got = self._scratch[key] = (xp.empty((q.shape[0], self.tiles)),
                                        xp.zeros(q.shape[0], dtype=xp.int32))
        return got

    def __call__(self, rows, q, aux, qnew, dx, dy, dt, params, lim, cfl_out, edge_out,
                 status_out=None, stream=None):
        from forestpy.cuda_device import launch_kernel, launch_stream

        if stream is None:
            stream = launch_stream()
        for name, a in (("q", q), ("aux", aux), ("qnew", qnew), ("edge_out", edge_out)):
            if not a.flags.c_contiguous:
                raise ValueError(f"the patch kernel needs a C-contiguous {name}")
        if self.status and status_out is None:
            raise ValueError("this kernel was built with status=True: pass status_out")
        if len(rows) == 0:
            return
        # arrays the kernel does not use are replaced by ones it only reads (the
        # simulator copies every host array back after a launch)
        st = status_out if self.status else dx
        cfl_tiles, tickets = self._tile_scratch(q) if self.tiles > 1 else (dx, rows)
        launch_kernel(self.kernel, len(rows) * self.tiles, self.nthreads, stream, rows,
                      q.reshape(-1), aux.reshape(-1), qnew.reshape(-1), dx, dy, dt_argument(dt),
                      params, lim, cfl_out, edge_out.reshape(-1), st, cfl_tiles, tickets)


def make_gpu_patch_kernel(riemann, mx: int, my: int, mbc: int, *, order: int = 2,
                          transverse_waves: int = 2, capacity_index: int = -1,
                          max_registers: int | None = None,
                          shared_bytes: int = SHARED_BYTES, rows_per_tile: int | None = None,
                          status: bool = False, work_sharing: bool | None = None,
                          cell_states: bool | None = None) -> PatchStepKernel:
    """Compiled whole-patch CUDA step for one Riemann solver, patch shape and option
    set (cached per process); a :class:`PatchStepKernel`.  Launch one block per entry
    of ``rows``.  Same results as :func:`.gpu_kernel.make_gpu_step_kernel`'s kernel
    and the CPU kernel (bit for bit without contracted multiply-adds).

    ``status``: also write ``status_out[p] = patch_status(qnew)[p]`` for every stepped
    patch (the positive components of ``riemann.positive``).  ``max_registers``: the
    register cap per thread (default: what lets two blocks share a multiprocessor).
    ``work_sharing``: call the solver's work-sharing pieces where it has them, as the
    CPU kernel does (default: :func:`.step_kernel.work_sharing_default`, on unless
    ``FORESTPY_WORK_SHARING=0``); ``False`` calls ``rpn2``/``rpt2``.  ``cell_states``
    (with work sharing): ``True`` computes every cell's state once per step into shared
    memory (phase 0), ``False`` in the threads that need it (two per face, three per
    cell of phase 3), ``None`` (default) the first unless it takes more, smaller tiles.
    """
    if mx < 2 or my < 2:
        raise ValueError("the GPU kernel needs mx, my >= 2")
    if mbc < 2:
        raise ValueError("mbc must be >= 2")
    if order not in (1, 2) or transverse_waves not in (0, 1, 2):
        raise ValueError("order must be 1 or 2 and transverse_waves 0, 1 or 2")
    if transverse_waves and riemann.rpt2 is None:
        raise ValueError(f"Riemann solver {riemann.name!r} has no rpt2; use transverse_waves=0")
    positive = tuple(int(k) for k in riemann.positive) if status else ()
    if work_sharing is None:
        from .step_kernel import work_sharing_default

        work_sharing = work_sharing_default()
    share = bool(work_sharing and riemann.shares_work)
    pieces = ((riemann.cell_state, riemann.edge_state, riemann.rpn2e,
               riemann.rpt2e if transverse_waves else None, int(riemann.num_cell_state),
               int(riemann.num_edge_state)) if share else None)
    key = (riemann.rpn2, riemann.rpt2 if transverse_waves else None, bool(riemann.fwave),
           int(riemann.num_eqn), int(riemann.num_waves), int(riemann.num_aux), mx, my, mbc,
           order, transverse_waves, max(capacity_index, -1), max_registers, shared_bytes,
           rows_per_tile, bool(status), positive, pieces,
           None if cell_states is None or not share else bool(cell_states))
    hit = _KERNELS.get(key)
    if hit is None:
        hit = _KERNELS[key] = _build(riemann, mx, my, mbc, order, transverse_waves,
                                     max(capacity_index, -1), max_registers, shared_bytes,
                                     rows_per_tile, bool(status), positive, share,
                                     cell_states)
    return hit


def _warp_tools():
    """Device function ``shfl_down(v, d, t, scratch)``: lane ``t + d``'s
    ``v`` in ``t``'s warp (``v`` itself past the warp's end).  Every thread of the
    block must call it.  On the GPU ``shfl_down_sync``; in the simulator (no warp
    intrinsics) the same values through shared memory and two barriers."""
    from forestpy.backend import cuda_simulator_enabled

    if cuda_simulator_enabled():

        @cuda.jit(device=True, inline=True)
        def shfl_down(v, d, t, scratch):
            scratch[t] = v
            cuda.syncthreads()
            r = scratch[t + d] if t % 32 + d < 32 else v
            cuda.syncthreads()
            return r

    else:

        @cuda.jit(device=True, inline=True)
        def shfl_down(v, d, t, scratch):
            return cuda.shfl_down_sync(0xFFFFFFFF, v, d)

    return shfl_down


def _build(riemann, MX, MY, MBC, ORDER, TRANS, CAPA, max_registers, shared_bytes, rows,
           STATUS, POSITIVE, SHARE, cells):
    MEQN = int(riemann.num_eqn)
    MWAVES = int(riemann.num_waves)
    MAUX = int(riemann.num_aux)
    MAUXL = max(MAUX, 1)
    FWAVE = bool(riemann.fwave)
    NCOL = 1 + len(POSITIVE)
    # the work-sharing contract: NCS doubles of cell state, NES of face state (kept in
    # the face's record only when phase 3 reads it)
    NCS = int(riemann.num_cell_state) if SHARE else 0
    HAS_EDGE = SHARE and riemann.edge_state is not None
    NES = int(riemann.num_edge_state) if HAS_EDGE else 0
    STORE_ES = HAS_EDGE and TRANS > 0

    def plan(ncs):
        return plan_patch(MX, MY, MEQN, MWAVES, ORDER, TRANS > 0, shared_bytes, rows=rows,
                          status_cols=NCOL if STATUS else 0, cell_state=ncs, edge_state=NES)

    CELLS = SHARE and cells is not False
    if CELLS and cells is None:
        # C where it costs no thread-slots per patch (more, smaller tiles) against
        # computing the cell states in the face and cell threads
        try:
            with_c = plan(NCS)
        except ValueError:
            with_c = None
        without = plan(0)
        CELLS = with_c is not None and (with_c[1] * -(-MY // with_c[0])
                                        <= without[1] * -(-MY // without[0]))
    NCS_C = NCS if CELLS else 0
    R, NT, NA, NF = plan(NCS_C)
    ESC = (3 if ORDER == 2 else 2) * MEQN  # the face state's first component in F
    FREC = ESC + (NES if STORE_ES else 0)
    NCW = MX + 4  # cells per row of C (columns -2 .. mx+1)
    NCSC = (R + 4) * NCW  # cells of C (rows j0-2 .. j0+R+1): C's stride per component
    CSB = NF - NCS_C * NCSC  # C's offset in Fs (after the face records)
    NCSL = max(NCS, 1)
    NESL = max(NES, 1)
    NTILES = -(-MY // R)
    CORR = TRANS == 2 and ORDER == 2
    NXT = MX + 2 * MBC  # row length of the padded patch
    NYT = MY + 2 * MBC
    PLANE = NXT * NYT  # one component of one patch
    QP = MEQN * PLANE  # one patch of q
    AP = MAUX * PLANE  # one patch of aux
    MAXM = max(MX, MY)
    EP = 4 * MEQN * MAXM  # one patch of edge_out
    NWARP = NT // 32
    POS = POSITIVE if POSITIVE else (0,)
    rpn2 = cuda_device(riemann.rpn2)
    rpt2 = cuda_device(riemann.rpt2) if TRANS else None
    if SHARE:
        cell_state = cuda_device(riemann.cell_state)
        edge_state = cuda_device(riemann.edge_state) if HAS_EDGE else None
        rpn2e = cuda_device(riemann.rpn2e)
        rpt2e = cuda_device(riemann.rpt2e) if TRANS else None
    else:
        cell_state = edge_state = rpn2e = rpt2e = None
    limiter = cuda_device(limiter_apply)
    shfl_down = _warp_tools()
    from forestpy.backend import cuda_simulator_enabled

    NRED = NWARP
    NWSC = NT if cuda_simulator_enabled() else 1
    if max_registers is None:
        # two blocks per multiprocessor (65536 registers), in steps of 8
        max_registers = min(255, 65536 // (2 * NT) // 8 * 8)
    opts = {} if cuda_simulator_enabled() else {"max_registers": max_registers}

    def make_pass(IXY):
        """The pass in direction ``IXY`` over one tile, as a force-inlined device
        function with the direction's index steps compile-time constants.

        Faces form ``NL`` lines of ``NN`` faces along the normal (x pass: rows
        ``j0-1 .. j0+rt``, faces ``i = MBC-1 .. MBC+MX+1``; y pass: columns
        ``i = MBC-1 .. MBC+MX``, faces ``j = j0-1 .. j0+rt+1``); face ``(l, n)`` lies
        between cells ``n - 1`` and ``n`` of line ``l`` (numbered from the line's
        first cell: array index ``MBC - 2``, so face ``n``'s upper cell is ``MBC - 1 +
        n``).  Thread ``f`` has face ``f``, numbered so that consecutive threads step
        along x (coalesced loads in both passes).
        ``F`` holds the limited faces ``n = 1 .. NN-2``, ``T`` the cells between them
        (``k = 0 .. NN-4``, cell ``k`` between faces ``k + 1`` and ``k + 2``).  With work
        sharing ``C`` (in ``Fs`` from ``CSB``) holds the cell states of the tile's rows
        ``j0-2 ..`` and columns ``-2 ..``, ``NCW`` cells a row.
        """
        if IXY == 1:
            DN = 1  # flat step to the next cell along the normal
            DT = NXT  # ... along the face (transverse direction)
            CSD = 1  # ... and in C
        else:
            DN = NXT
            DT = 1
            CSD = NCW

        @cuda.jit(device=True, inline=True)
        def face_pass(p, t, j0, rt, q, aux, qnew, edge_out, params, lim, dtdn, dtdt, A, Fs,
                      cfl, regs, acc, last):
            # local arrays in two tuples: a call of more than 30 arguments compiles to a
            # call with *args, which Numba cannot inline
            ql, qr, al, ar, a1, a2, a3, wave, s, amdq, apdq, cq, bm, bp, csl, csr, es = regs
            fxl, fxr, gyl, gyu = acc
            qb = p * QP
            ab = p * AP
            if IXY == 1:
                NL = rt + 2
                NN = MX + 3
            else:
                NL = MX + 2
                NN = rt + 3
            NLIM = NN - 2
            NCL = NN - 3
            # face f -> (line l, place n); flat index of its right / upper cell
            if IXY == 1:
                l = t // NN
                n = t % NN
                cell = (j0 - 1 + l) * NXT + (MBC - 1 + n)
                lf = l * NLIM + (n - 1)  # its record in F
                csc = CSB + (l + 1) * NCW + (n + 1)  # the cell's state in C
            else:
                n = t // NL
                l = t % NL
                cell = (j0 - 1 + n) * NXT + (MBC - 1 + l)
                lf = (n - 1) * NL + l
                csc = CSB + (n + 1) * NCW + (l + 1)
            act = t < NL * NN
            lim_face = act and n >= 1 and n <= NN - 2
            # (1) normal Riemann problem; the waves to W, the fluctuations of a limited
            # face to its record in F (only the speeds stay in registers)
            NLF = NL * NLIM
            if act:
                for m in range(MEQN):
                    ql[m] = q[qb + m * PLANE + cell - DN]
                    qr[m] = q[qb + m * PLANE + cell]
                for a in range(MAUX):
                    al[a] = aux[ab + a * PLANE + cell - DN]
                    ar[a] = aux[ab + a * PLANE + cell]
                if SHARE:
                    # the two cell states (from C, or computed here), the face's state
                    # once; float64 rows, as in the CPU kernel
                    if CELLS:
                        for m in range(NCS):
                            csl[m] = Fs[m * NCSC + csc - CSD]
                            csr[m] = Fs[m * NCSC + csc]
                    else:
                        cst = cell_state(ql, al, params)
                        for m in range(NCS):
                            csl[m] = cst[m]
                        cst = cell_state(qr, ar, params)
                        for m in range(NCS):
                            csr[m] = cst[m]
                    if HAS_EDGE:
                        e = edge_state(IXY, ql, qr, csl, csr, al, ar, params)
                        for m in range(NES):
                            es[m] = e[m]
                    rpn2e(IXY, ql, qr, csl, csr, al, ar, params, es, wave, s, amdq, apdq)
                else:
                    rpn2(IXY, ql, qr, al, ar, params, wave, s, amdq, apdq)
                for m in range(MEQN):
                    for w in range(MWAVES):
                        A[(m * MWAVES + w) * NT + t] = wave[m, w]
                if lim_face:
                    for m in range(MEQN):
                        Fs[m * NLF + lf] = amdq[m]
                        Fs[(MEQN + m) * NLF + lf] = apdq[m]
                    if STORE_ES:  # the face's state for phase 3, after amdq, apdq, cq
                        for m in range(NES):
                            Fs[(ESC + m) * NLF + lf] = es[m]
            cuda.syncthreads()
            # (2) Courant number, limited correction from the face's and its
            # neighbours' waves; the correction to the face's record
            if lim_face:
                dl = dtdn
                dr = dtdn
                if CAPA >= 0:  # as the CPU kernel: dt/dx times the inverse capacity
                    dl = dtdn * (1.0 / aux[ab + CAPA * PLANE + cell - DN])
                    dr = dtdn * (1.0 / aux[ab + CAPA * PLANE + cell])
                if (l >= 1 and l <= rt) if IXY == 1 else (l >= 1 and l <= MX):
                    for w in range(MWAVES):
                        sp = s[w]
                        c = max(dr * sp, -dl * sp)
                        if c > cfl:
                            cfl = c
                if ORDER == 2:
                    for m in range(MEQN):
                        cq[m] = 0.0
                    dtdxave = 0.5 * (dl + dr)
                    FN = 1 if IXY == 1 else NL  # the next face along the normal
                    for w in range(MWAVES):
                        wn = 0.0
                        for m in range(MEQN):
                            wv = A[(m * MWAVES + w) * NT + t]
                            wn += wv * wv
                        if wn == 0.0:
                            continue
                        sp = s[w]
                        tu = t - FN if sp > 0.0 else t + FN
                        dot = 0.0
                        for m in range(MEQN):
                            dot += A[(m * MWAVES + w) * NT + tu] * A[(m * MWAVES + w) * NT + t]
                        phi = limiter(lim[w], dot / wn)
                        asp = abs(sp)
                        if FWAVE:
                            c = phi * math.copysign(1.0, sp) * (1.0 - asp * dtdxave)
                        else:
                            c = phi * asp * (1.0 - asp * dtdxave)
                        for m in range(MEQN):
                            cq[m] += c * A[(m * MWAVES + w) * NT + t]
                    for m in range(MEQN):
                        Fs[(2 * MEQN + m) * NLF + lf] = cq[m]
            cuda.syncthreads()
            # (3) one thread per cell of the lines: the transverse splittings entering
            # it (imp 2 of its lower face, imp 1 of its upper face) to T (over W)
            if TRANS and t < NL * NCL:
                if IXY == 1:
                    l = t // NCL
                    k = t % NCL
                    c0 = (j0 - 1 + l) * NXT + (MBC + k)  # the cell
                    f0 = l * NLIM + k  # its lower face in F; the upper one is f0 + 1
                    f1 = f0 + 1
                    cs0 = CSB + (l + 1) * NCW + (k + 2)  # its state in C
                else:
                    k = t // NL
                    l = t % NL
                    c0 = (j0 + k) * NXT + (MBC - 1 + l)
                    f0 = k * NL + l
                    f1 = f0 + NL
                    cs0 = CSB + (k + 2) * NCW + (l + 1)
                dc = dtdn
                if CAPA >= 0:
                    dc = dtdn * (1.0 / aux[ab + CAPA * PLANE + c0])
                coef = -0.5 * dc
                for a in range(MAUX):
                    a1[a] = aux[ab + a * PLANE + c0 - DT]
                    a2[a] = aux[ab + a * PLANE + c0]
                    a3[a] = aux[ab + a * PLANE + c0 + DT]
                # the right-going part of the lower face enters the cell
                for m in range(MEQN):
                    ql[m] = q[qb + m * PLANE + c0 - DN]
                    qr[m] = q[qb + m * PLANE + c0]
                    v = Fs[(MEQN + m) * NLF + f0]
                    if CORR:
                        v -= Fs[(2 * MEQN + m) * NLF + f0]
                    amdq[m] = v
                if SHARE:  # the stored state of the face, the states of its two cells
                    if CELLS:
                        for m in range(NCS):
                            csl[m] = Fs[m * NCSC + cs0 - CSD]
                            csr[m] = Fs[m * NCSC + cs0]
                    else:  # (each cell with its own aux, as in the CPU kernel)
                        for a in range(MAUX):
                            al[a] = aux[ab + a * PLANE + c0 - DN]
                        cst = cell_state(ql, al, params)
                        for m in range(NCS):
                            csl[m] = cst[m]
                        cst = cell_state(qr, a2, params)
                        for m in range(NCS):
                            csr[m] = cst[m]
                    if STORE_ES:
                        for m in range(NES):
                            es[m] = Fs[(ESC + m) * NLF + f0]
                    rpt2e(IXY, 2, ql, qr, csl, csr, a1, a2, a3, params, es, amdq, bm, bp)
                else:
                    rpt2(IXY, 2, ql, qr, a1, a2, a3, params, amdq, bm, bp)
                for m in range(MEQN):
                    cq[m] = coef * bm[m]  # the lower face's part (cq, apdq: scratch)
                    apdq[m] = coef * bp[m]
                # the left-going part of the upper face
                for m in range(MEQN):
                    ql[m] = qr[m]
                    qr[m] = q[qb + m * PLANE + c0 + DN]
                    v = Fs[m * NLF + f1]
                    if CORR:
                        v += Fs[(2 * MEQN + m) * NLF + f1]
                    amdq[m] = v
                if SHARE:
                    if CELLS:
                        for m in range(NCS):
                            csl[m] = csr[m]
                            csr[m] = Fs[m * NCSC + cs0 + CSD]
                    else:
                        for a in range(MAUX):
                            ar[a] = aux[ab + a * PLANE + c0 + DN]
                        cst = cell_state(qr, ar, params)
                        for m in range(NCS):
                            csl[m] = csr[m]
                            csr[m] = cst[m]
                    if STORE_ES:
                        for m in range(NES):
                            es[m] = Fs[(ESC + m) * NLF + f1]
                    rpt2e(IXY, 1, ql, qr, csl, csr, a1, a2, a3, params, es, amdq, bm, bp)
                else:
                    rpt2(IXY, 1, ql, qr, a1, a2, a3, params, amdq, bm, bp)
                # summed in the row-tile kernel's order (lower face first)
                for m in range(MEQN):
                    A[(2 * m) * NT + t] = cq[m] + coef * bm[m]  # tlo
                    A[(2 * m + 1) * NT + t] = apdq[m] + coef * bp[m]  # thi
            cuda.syncthreads()
            # (4) the interior cell gathers its faces and its neighbours' transverse
            # sums (the thread keeps its cell in both passes: x pass line jr + 1, place
            # ci; y pass line ci + 1, place jr)
            own = t < rt * MX
            jr = t // MX
            ci = t % MX
            if own:
                if IXY == 1:
                    f0 = (jr + 1) * NLIM + ci
                    f1 = f0 + 1
                    tc = (jr + 1) * NCL + ci  # the cell in T; its lower neighbour
                    tm = tc - NCL  # (previous line) and its upper one
                    tp = tc + NCL
                else:
                    f0 = jr * NL + ci + 1
                    f1 = f0 + NL
                    tc = jr * NL + ci + 1
                    tm = tc - 1
                    tp = tc + 1
                cj = j0 + jr
                kc = 1.0
                if CAPA >= 0:
                    kc = 1.0 / aux[ab + CAPA * PLANE + cj * NXT + MBC + ci]
                for m in range(MEQN):
                    if ORDER == 2:
                        lo_face = 0.5 * Fs[(2 * MEQN + m) * NLF + f0] - Fs[(MEQN + m) * NLF + f0]
                        hi_face = Fs[m * NLF + f1] + 0.5 * Fs[(2 * MEQN + m) * NLF + f1]
                    else:  # the row-tile kernel's (and CPU's) 0 + x
                        lo_face = 0.5 * 0.0 - Fs[(MEQN + m) * NLF + f0]
                        hi_face = Fs[m * NLF + f1] + 0.5 * 0.0
                    tlo = 0.0
                    thi = 0.0
                    thim = 0.0
                    tlop = 0.0
                    if TRANS:
                        tlo = A[(2 * m) * NT + tc]
                        thi = A[(2 * m + 1) * NT + tc]
                        thim = A[(2 * m + 1) * NT + tm]
                        tlop = A[(2 * m) * NT + tp]
                    if IXY == 1:  # kept in registers for the y pass
                        fxl[m] = lo_face
                        fxr[m] = hi_face
                        gyl[m] = tlo + thim
                        gyu[m] = thi + tlop
                    else:  # the cell's update and edge fluxes, both passes summed
                        fm_r = (fxr[m] + thi) + tlop
                        fp_l = (fxl[m] + thim) + tlo
                        gm_u = gyu[m] + hi_face
                        gp_l = gyl[m] + lo_face
                        cc = qb + m * PLANE + cj * NXT + MBC + ci
                        qnew[cc] = (q[cc] - (dtdt * kc) * (fm_r - fp_l)
                                    - (dtdn * kc) * (gm_u - gp_l))
                        eb = p * EP + m * MAXM
                        if ci == 0:
                            edge_out[eb + cj - MBC] = fp_l
                        if ci == MX - 1:
                            edge_out[eb + MEQN * MAXM + cj - MBC] = fm_r
                        if cj == MBC:
                            edge_out[eb + 2 * MEQN * MAXM + ci] = gp_l
                        if cj == MBC + MY - 1:
                            edge_out[eb + 3 * MEQN * MAXM + ci] = gm_u
            if not last:  # the next pass overwrites A and F
                cuda.syncthreads()
            return cfl

        return face_pass

    x_pass = make_pass(1)
    y_pass = make_pass(2)

    @cuda.jit(device=True, inline=True)
    def status_lane(qnew, p, v, col):
        """``patch_status``'s value of its thread ``v`` (cells ``v, v + 128, ...``) for
        column ``col`` of patch ``p``, in that kernel's order."""
        qb = p * QP
        acc = 0.0 if col == 0 else math.inf
        for c in range(v, MX * MY, STATUS_LANES):
            cell = (MBC + c // MX) * NXT + MBC + c % MX
            if col == 0:
                for m in range(MEQN):
                    acc += qnew[qb + m * PLANE + cell]
            else:
                x = qnew[qb + POS[col - 1] * PLANE + cell]
                if x < acc:
                    acc = x
        return acc

    @cuda.jit(device=True, inline=True)
    def pair(a, b, col):
        """The status kernel's tree step: ``a + b`` (sums) or ``b if b < a else a``."""
        if col == 0:
            return a + b
        return b if b < a else a

    @cuda.jit(**opts)
    def step(rows, q, aux, qnew, dx, dy, dtv, params, lim, cfl_out, edge_out, status_out,
             cfl_tiles, tickets):
        dt = device_scalar(dtv)
        b = cuda.blockIdx.x
        p = rows[b // NTILES]
        tile = b % NTILES
        t = cuda.threadIdx.x
        A = cuda.shared.array(NA, float64)
        Fs = cuda.shared.array(NF, float64)
        red = cuda.shared.array(NRED, float64)
        wsc = cuda.shared.array(NWSC, float64)  # the simulator's shuffles
        last = cuda.shared.array(1, int32)
        regs = (cuda.local.array(MEQN, float64),  # ql
                cuda.local.array(MEQN, float64),  # qr
                cuda.local.array(MAUXL, float64),  # auxl, auxr
                cuda.local.array(MAUXL, float64),
                cuda.local.array(MAUXL, float64),  # transverse aux1, aux2, aux3
                cuda.local.array(MAUXL, float64),
                cuda.local.array(MAUXL, float64),
                cuda.local.array((MEQN, MWAVES), float64),  # wave
                cuda.local.array(MWAVES, float64),  # s
                cuda.local.array(MEQN, float64),  # amdq
                cuda.local.array(MEQN, float64),  # apdq
                cuda.local.array(MEQN, float64),  # cq
                cuda.local.array(MEQN, float64),  # bmasdq
                cuda.local.array(MEQN, float64),  # bpasdq
                cuda.local.array(NCSL, float64),  # cell states (work sharing)
                cuda.local.array(NCSL, float64),
                cuda.local.array(NESL, float64))  # face state
        # the cell's partial edge fluxes of the x pass, for the y pass
        acc = (cuda.local.array(MEQN, float64), cuda.local.array(MEQN, float64),
               cuda.local.array(MEQN, float64), cuda.local.array(MEQN, float64))
        dtdx = dt / dx[p]
        dtdy = dt / dy[p]
        if tile == 0:
            # unused edge entries (mx != my) are zero, as on the CPU
            for e in range(t, 4 * MEQN * MAXM, NT):
                side = e // (MEQN * MAXM)
                k = e % MAXM
                if k >= (MY if side < 2 else MX):
                    edge_out[p * EP + e] = 0.0
        j0 = MBC + tile * R
        rt = R if tile < NTILES - 1 else MY - (NTILES - 1) * R
        if SHARE:  # without an edge state the CPU kernel's row of zeros
            es = regs[16]
            for m in range(NESL):
                es[m] = 0.0
        if CELLS:
            # (0) every cell's state once for the step (both passes read it), into C
            ql = regs[0]
            al = regs[2]
            qb = p * QP
            ab = p * AP
            for cc in range(t, (rt + 4) * NCW, NT):
                cell = (j0 - 2 + cc // NCW) * NXT + (MBC - 2 + cc % NCW)
                for m in range(MEQN):
                    ql[m] = q[qb + m * PLANE + cell]
                for a in range(MAUX):
                    al[a] = aux[ab + a * PLANE + cell]
                cst = cell_state(ql, al, params)
                for m in range(NCS):
                    Fs[CSB + m * NCSC + cc] = cst[m]
            cuda.syncthreads()
        cfl = x_pass(p, t, j0, rt, q, aux, qnew, edge_out, params, lim, dtdx, dtdy, A, Fs,
                     0.0, regs, acc, False)
        cfl = y_pass(p, t, j0, rt, q, aux, qnew, edge_out, params, lim, dtdy, dtdx, A, Fs,
                     cfl, regs, acc, True)
        # epilogue: the block's largest Courant number (warp shuffles, a slot per warp)
        for d in (16, 8, 4, 2, 1):
            o = shfl_down(cfl, d, t, wsc)
            if o > cfl:
                cfl = o
        if t % 32 == 0:
            red[t // 32] = cfl
        if NTILES > 1 and STATUS:
            cuda.threadfence()  # this thread's qnew before the block's ticket
        cuda.syncthreads()  # also: the block's qnew visible to all its threads
        c = red[0]
        for w in range(1, NWARP):
            if red[w] > c:
                c = red[w]
        finish = True
        if NTILES > 1:
            # a patch in several blocks: the last of them (a ticket per patch, back to 0
            # for the next launch) takes the largest of the tiles' numbers, in tile
            # order, and the status of the whole patch
            if t == 0:
                cfl_tiles[p, tile] = c
                cuda.threadfence()
                last[0] = 1 if cuda.atomic.add(tickets, p, 1) == NTILES - 1 else 0
            cuda.syncthreads()
            finish = last[0] == 1
            if finish and t == 0:
                c = cfl_tiles[p, 0]
                for k in range(1, NTILES):
                    if cfl_tiles[p, k] > c:
                        c = cfl_tiles[p, k]
                tickets[p] = 0
        if finish:
            if t == 0:
                cfl_out[p] = c
            if STATUS:
                # the new state's status row (A is free), then the status kernel's tree
                # (strides 64, 32, ..., 1) by the first warp: strides 64 and 32 in each
                # lane, then shuffles
                for v in range(t, STATUS_LANES, NT):
                    for col in range(NCOL):
                        A[col * STATUS_LANES + v] = status_lane(qnew, p, v, col)
                cuda.syncthreads()
                for col in range(NCOL):
                    b = col * STATUS_LANES
                    u = 0.0
                    if t < 32:
                        u = pair(pair(A[b + t], A[b + t + 64], col),
                                 pair(A[b + t + 32], A[b + t + 96], col), col)
                    for d in (16, 8, 4, 2, 1):
                        o = shfl_down(u, d, t, wsc)
                        if t < d:
                            u = pair(u, o, col)
                    if t == 0:
                        status_out[p, col] = u

    return PatchStepKernel(fast_kernel(step), NT, R, NTILES, NA + NF, STATUS,
                           record_doubles=FREC, cell_state_doubles=NCS_C * NCSC,
                           max_registers=max_registers, work_sharing=SHARE,
                           cell_states=CELLS)
