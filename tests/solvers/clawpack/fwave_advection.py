"""A user-defined Riemann solver, written in plain Python with no Numba or CUDA code
(the kernels compile it): conservative advection q_t + (u q)_x + (v q)_y = 0 with the
cell velocities u, v in aux, in f-wave form.

The CPU and GPU kernel tests use the same two functions, so the CPU step kernel is
compiled once for both (the compiled module is per ``rpn2``/``rpt2``, whatever
``num_aux``).
"""

from forestpy.vtable import RiemannSolver


def rpn2(ixy, ql, qr, auxl, auxr, params, wave, s, amdq, apdq):
    ul = auxl[ixy - 1]
    ur = auxr[ixy - 1]
    f = ur * qr[0] - ul * ql[0]
    wave[0, 0] = f
    s[0] = 0.5 * (ul + ur)
    if s[0] < 0.0:
        amdq[0] = f
        apdq[0] = 0.0
    else:
        amdq[0] = 0.0
        apdq[0] = f


def rpt2(ixy, imp, ql, qr, aux1, aux2, aux3, params, asdq, bmasdq, bpasdq):
    it = 2 - ixy  # transverse velocity component
    vm = 0.5 * (aux1[it] + aux2[it])
    vp = 0.5 * (aux2[it] + aux3[it])
    bmasdq[0] = min(vm, 0.0) * asdq[0]
    bpasdq[0] = max(vp, 0.0) * asdq[0]


def fwave_advection(name: str, num_aux: int, **kw) -> RiemannSolver:
    """The solver with ``num_aux`` aux fields (u, v, then e.g. a capacity)."""
    return RiemannSolver(name=name, num_eqn=1, num_waves=1, rpn2=rpn2, rpt2=rpt2,
                         num_aux=num_aux, fwave=True, **kw)
