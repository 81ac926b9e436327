r"""Two-layer shallow water: the projected 1D fluxes of IR-Roe and IFCP, pointwise.

The 2D system (de la Asunción, Mantas, Castro, Fernández-Nieto; layer 1 on top, layer 2
below, :math:`r = \rho_1/\rho_2 < 1`, :math:`H` the depth of the bottom below a fixed
level) projected on an edge normal :math:`\eta` gives, for the normal unknowns
:math:`w = (h_1, q_{1,\eta}, h_2, q_{2,\eta})`, the non-conservative 1D system
:math:`w_t + F(w)_x = B(w) w_x + S(w) H_x` with

.. math::

    F(w) = \left(q_1,\ \frac{q_1^2}{h_1} + \frac g2 h_1^2,\ q_2,\
    \frac{q_2^2}{h_2} + \frac g2 h_2^2\right), \quad
    B w_x = -\left(0,\ g h_1 \partial_x h_2,\ 0,\ r g h_2 \partial_x h_1\right), \quad
    S = (0,\ g h_1,\ 0,\ g h_2),

plus the transport of the tangential momenta :math:`q_{k,\perp}` by the layer's mass
flux.  Every scheme here evaluates, once per edge, the jump

.. math::

    R = F(w_R) - F(w_L) - B_{LR} (w_R - w_L) - S_{LR} (H_R - H_L) = A_{LR}\,\Delta w
    - S_{LR}\,\Delta H,

with the Roe matrix :math:`A_{LR}` of the seed (arithmetic mean depths
:math:`\bar h_k`, square-root-weighted mean velocities :math:`\tilde u_k`, which make
:math:`R = A_{LR}\Delta w - S_{LR}\Delta H` exact),

.. math::

    A = \begin{pmatrix} 0 & 1 & 0 & 0 \\ c_1^2 - u_1^2 & 2u_1 & c_1^2 & 0 \\
    0 & 0 & 0 & 1 \\ r c_2^2 & 0 & c_2^2 - u_2^2 & 2u_2 \end{pmatrix},\qquad
    c_k^2 = g \bar h_k .

The momentum rows of :math:`R` are written with the jumps of the free surface and of
the interface, :math:`g\bar h_1(\Delta h_1 + \Delta\eta_2)` and
:math:`g\bar h_2(\Delta\eta_2 + r\Delta h_1)`, :math:`\eta_2 = h_2 - H`, so that water
at rest in both layers gives :math:`R = 0` up to the rounding of :math:`\eta_2`
(well-balanced).  The left-going fluctuation is :math:`D^- = \tfrac12 (I - Q A^{-1}) R`
and the right-going one :math:`D^+ = R - D^-`:

* **IR-Roe** (the seed's scheme): :math:`Q A^{-1} = K\,\mathrm{sgn}(\Lambda)\,K^{-1}`.
  The eigenvalues are the roots of
  :math:`p(\lambda) = ((\lambda-u_1)^2 - c_1^2)((\lambda-u_2)^2 - c_2^2) - r c_1^2c_2^2`,
  evaluated as :math:`ab - g(\bar h_2 a + \bar h_1 b) + (1-r) g^2 \bar h_1\bar h_2`
  (:math:`a = (\lambda-u_1)^2`, :math:`b = (\lambda-u_2)^2`) so that the small internal
  speeds do not cancel when :math:`r \approx 1`.  The two external roots start from
  :math:`U_m \pm \sqrt{g(\bar h_1+\bar h_2)}` and take five Newton steps; division by
  their factor leaves a quadratic whose roots are the internal pair (two more Newton
  steps).  Eigenvectors in closed form: :math:`K_i = (1, \lambda_i, -k_i,
  -k_i\lambda_i)`, :math:`k_i = 1 - (\lambda_i-u_1)^2/c_1^2`; the rows of :math:`K^{-1}`
  are the left eigenvectors :math:`l_i = ((\lambda_i-2u_1)b,\ b,\ (\lambda_i-2u_2)d_i,\
  d_i)`, :math:`b = -r c_2^2`, :math:`d_i = c_1^2 k_i`, divided by
  :math:`l_i\cdot K_i`.
  *Entropy fix* (Harten and Hyman 1983): :math:`\mathrm{sgn}(\lambda_i)` becomes
  :math:`\lambda_i/|\lambda_i|_\delta` with :math:`|\lambda|_\delta = (\lambda^2 +
  \delta^2)/(2\delta)` for :math:`|\lambda| < \delta_i = \max(0, \lambda_i -
  \lambda_i^L, \lambda_i^R - \lambda_i)`, the speeds of the left and right states
  :math:`\lambda_i^{L,R}` taken from the first-order formulas below.
  *Loss of hyperbolicity*: when the internal pair is complex (the quadratic's
  discriminant is not positive: shear :math:`(u_1-u_2)^2 \gtrsim g'(h_1+h_2)`), the
  edge uses IFCP's viscosity matrix built on the exact external speeds and
  :math:`\chi = \mathrm{sign}(\mathrm{Re}\,\lambda_{int})|\lambda_{int}|`; the scheme
  stays defined and dissipative there (``hyperbolic`` in the result is 0).
* **IFCP** (Fernández-Nieto, Castro, Parés 2011): :math:`Q = P(A)`, the parabola
  :math:`P` through :math:`(\lambda_1, |\lambda_1|)`, :math:`(\lambda_4, |\lambda_4|)`,
  :math:`(\chi, |\chi|)`, with the first-order speeds :math:`\lambda_{1,4} = U_m \mp
  \sqrt{g(h_1+h_2)}`, :math:`U_m = (q_1+q_2)/(h_1+h_2)`, and :math:`\chi =
  \mathrm{sign}(U_c)\max|\lambda_{int,\pm}|`, :math:`\lambda_{int,\pm} = U_c \pm
  \sqrt{g' h_1h_2/(h_1+h_2)\,(1 - (u_1-u_2)^2/(g'(h_1+h_2)))}`,
  :math:`U_c = (u_1h_2+u_2h_1)/(h_1+h_2)`, :math:`g' = (1-r)g` (a negative radicand
  counts as zero).  :math:`Q A^{-1} R = Q(\Delta w - A^{-1}S\,\Delta H)`, with
  :math:`A^{-1}S` solved in closed form (singular only at a critical point,
  :math:`p(0) = 0`, where the bottom jump then has no defined upwinding).

The tangential momenta are transported with the layer's mass flux
:math:`\Phi_k = q_{k,L} + D^-_{2k-1}` and the upwind tangential velocity
(:math:`u^*_{k,\perp} = u_{k,\perp,L}` if :math:`\Phi_k > 0`, else the right one), as in
the seed's equation (4).

Every function is scalar arithmetic on its arguments, compiled for the CPU with Numba
and for the GPU with Numba-CUDA from this one source (:func:`specialised`), in FP64 or,
with the constants retyped, in FP32 arithmetic.  None raises: a negative depth gives NaN,
which the solver's depth check reports.

References
----------
M. de la Asunción, J. M. Mantas, M. J. Castro, E. D. Fernández-Nieto, An MPI-CUDA
implementation of an improved Roe method for two-layer shallow water systems, J.
Parallel Distrib. Comput. 72 (2012) 1065-1072.
E. D. Fernández-Nieto, M. J. Castro, C. Parés, On an intermediate field capturing
Riemann solver based on a parabolic viscosity matrix for the two-layer shallow water
system, J. Sci. Comput. 48 (2011) 117-140.
A. Harten, J. M. Hyman, Self adjusting grid methods for one-dimensional hyperbolic
conservation laws, J. Comput. Phys. 50 (1983) 235-269.
J. B. Schijf, J. C. Schönfeld, Theoretical considerations on the motion of salt and
fresh water, Proc. Minnesota Int. Hydraulics Conv. (1953) 321-333 (the first-order
speeds).
"""

from __future__ import annotations

import math
import types

import numba
import numpy as np
from numba.core.registry import CPUDispatcher

__all__ = ["CONSTANTS", "constants", "eigenvalues_roe", "flux_edge_ifcp", "flux_edge_irroe",
           "fluctuation_ifcp", "fluctuation_irroe", "retyped", "specialised",
           "speeds_first_order"]

# every literal of the arithmetic below: FP32 arithmetic retypes these (specialised)
ZERO = 0.0
HALF = 0.5
ONE = 1.0
TWO = 2.0
FOUR = 4.0
REAL = numba.float64  # the arithmetic's type, for casts
#: the names of the module constants that :func:`specialised` retypes
CONSTANTS = ("ZERO", "HALF", "ONE", "TWO", "FOUR", "REAL")


@numba.njit(inline="always")
def _sign(x):
    if x > ZERO:
        return ONE
    if x < ZERO:
        return -ONE
    return ZERO


@numba.njit
def _quartic(lam, u1, u2, gh1, gh2, g_prime_g_h1h2):
    """p(lambda) in the cancellation-free form, and p'(lambda)."""
    d1 = lam - u1
    d2 = lam - u2
    a = d1 * d1
    b = d2 * d2
    p = a * b - (gh2 * a + gh1 * b) + g_prime_g_h1h2
    dp = TWO * d1 * (b - gh2) + TWO * d2 * (a - gh1)
    return p, dp


@numba.njit
def _newton(lam, u1, u2, gh1, gh2, c0, n):
    for _ in range(n):
        p, dp = _quartic(lam, u1, u2, gh1, gh2, c0)
        if dp != ZERO:
            lam = lam - p / dp
    return lam


@numba.njit
def speeds_first_order(h1, u1, h2, u2, g, r):
    """First-order (Schijf-Schönfeld) speeds ``(ext-, int-, int+, ext+)`` of a state;
    a negative internal radicand counts as zero."""
    htot = h1 + h2
    um = (u1 * h1 + u2 * h2) / htot
    ce = math.sqrt(g * htot)
    gp = (ONE - r) * g
    uc = (u1 * h2 + u2 * h1) / htot
    du = u1 - u2
    rad = gp * h1 * h2 / htot * (ONE - du * du / (gp * htot))
    ci = math.sqrt(max(rad, ZERO))
    return um - ce, uc - ci, uc + ci, um + ce


@numba.njit
def eigenvalues_roe(u1, u2, h1, h2, g, r):
    """Eigenvalues of the Roe matrix at mean depths ``h1, h2`` and velocities
    ``u1, u2``: ``(l1, l2, l3, l4, hyperbolic, c)``, ascending; ``c`` is the product of
    the internal pair.  For a complex internal pair (``hyperbolic == 0``) ``l2 == l3``
    is its real part and ``sqrt(c)`` its modulus."""
    gh1 = g * h1
    gh2 = g * h2
    c0 = (ONE - r) * g * gh1 * h2
    htot = h1 + h2
    um = (u1 * h1 + u2 * h2) / htot
    ce = math.sqrt(g * htot)
    l1 = _newton(um - ce, u1, u2, gh1, gh2, c0, 5)
    l4 = _newton(um + ce, u1, u2, gh1, gh2, c0, 5)
    # monic quartic: l^4 + a3 l^3 + a2 l^2 + a1 l + a0, divided by (l - l1)(l - l4)
    a3 = -TWO * (u1 + u2)
    a2 = (u1 * u1 - gh1) + (u2 * u2 - gh2) + FOUR * u1 * u2
    s = l1 + l4
    q = l1 * l4
    b = a3 + s
    c = a2 - q + s * b
    disc = b * b - FOUR * c
    mid = -HALF * b
    if disc > ZERO:
        half = HALF * math.sqrt(disc)
        l2 = mid - half
        l3 = mid + half
        # polish on the full quartic, a step only while it stays inside the pair's gap
        for _ in range(2):
            p, dp = _quartic(l2, u1, u2, gh1, gh2, c0)
            if dp != ZERO:
                st = p / dp
                if abs(st) < half:
                    l2 = l2 - st
            p, dp = _quartic(l3, u1, u2, gh1, gh2, c0)
            if dp != ZERO:
                st = p / dp
                if abs(st) < half:
                    l3 = l3 - st
        return l1, l2, l3, l4, ONE, c
    return l1, mid, mid, l4, ZERO, c


@numba.njit
def _sgn_fixed(lam, lam_l, lam_r):
    """``lam / |lam|_delta``: the sign of an eigenvalue with Harten-Hyman's entropy fix."""
    delta = max(ZERO, max(lam - lam_l, lam_r - lam))
    if abs(lam) < delta:
        return TWO * delta * lam / (lam * lam + delta * delta)
    return _sign(lam)


@numba.njit
def _jump(h1l, q1l, h2l, q2l, h1r, q1r, h2r, q2r, deta2, g, r):
    """R = F(w_R) - F(w_L) - B dw - S dH in the well-balanced form, and the Roe means."""
    u1l = q1l / h1l
    u1r = q1r / h1r
    u2l = q2l / h2l
    u2r = q2r / h2r
    hb1 = HALF * (h1l + h1r)
    hb2 = HALF * (h2l + h2r)
    dh1 = h1r - h1l
    s1l = math.sqrt(h1l)
    s1r = math.sqrt(h1r)
    s2l = math.sqrt(h2l)
    s2r = math.sqrt(h2r)
    ut1 = (s1l * u1l + s1r * u1r) / (s1l + s1r)
    ut2 = (s2l * u2l + s2r * u2r) / (s2l + s2r)
    r0 = q1r - q1l
    r1 = (q1r * u1r - q1l * u1l) + g * hb1 * (dh1 + deta2)
    r2 = q2r - q2l
    r3 = (q2r * u2r - q2l * u2l) + g * hb2 * (deta2 + r * dh1)
    return r0, r1, r2, r3, hb1, hb2, ut1, ut2, u1l, u1r, u2l, u2r


@numba.njit
def _pvm(r0, r1, r2, r3, dh1, dq1, dh2eta, dq2, dH, u1, u2, gh1, gh2, r,
         l1, l4, chi):
    """D^- = (R - P(A) (dw - A^{-1} S dH)) / 2 with P through (l1,|l1|), (l4,|l4|),
    (chi,|chi|); ``dh2eta`` is the jump of the interface elevation."""
    w1 = abs(l1) / ((l1 - l4) * (l1 - chi))
    w4 = abs(l4) / ((l4 - l1) * (l4 - chi))
    wc = abs(chi) / ((chi - l1) * (chi - l4))
    al2 = w1 + w4 + wc
    al1 = -(w1 * (l4 + chi) + w4 * (l1 + chi) + wc * (l1 + l4))
    al0 = w1 * l4 * chi + w4 * l1 * chi + wc * l1 * l4
    # v = dw - A^{-1} S dH, written so that water at rest gives v = 0 exactly
    e1 = gh1 - u1 * u1
    e2 = gh2 - u2 * u2
    det = e1 * e2 - r * gh1 * gh2
    v0 = dh1
    v2 = dh2eta
    if dH != ZERO:
        v0 = dh1 + gh1 * u2 * u2 / det * dH
        v2 = dh2eta - u2 * u2 * e1 / det * dH
    v1 = dq1
    v3 = dq2
    # A v and A (A v)
    a0 = v1
    a1 = e1 * v0 + TWO * u1 * v1 + gh1 * v2
    a2 = v3
    a3 = r * gh2 * v0 + e2 * v2 + TWO * u2 * v3
    b0 = a1
    b1 = e1 * a0 + TWO * u1 * a1 + gh1 * a2
    b2 = a3
    b3 = r * gh2 * a0 + e2 * a2 + TWO * u2 * a3
    d0 = HALF * (r0 - (al0 * v0 + al1 * a0 + al2 * b0))
    d1 = HALF * (r1 - (al0 * v1 + al1 * a1 + al2 * b1))
    d2 = HALF * (r2 - (al0 * v2 + al1 * a2 + al2 * b2))
    d3 = HALF * (r3 - (al0 * v3 + al1 * a3 + al2 * b3))
    return d0, d1, d2, d3


@numba.njit
def fluctuation_irroe(h1l, q1l, h2l, q2l, h1r, q1r, h2r, q2r, deta2, dH, g, r):
    """IR-Roe's left-going fluctuation ``D^-`` of the 4x4 subsystem, the jump ``R``,
    the largest speed and the hyperbolicity flag:
    ``(d0, d1, d2, d3, r0, r1, r2, r3, smax, hyperbolic)``."""
    r0, r1, r2, r3, hb1, hb2, u1, u2, u1l, u1r, u2l, u2r = _jump(
        h1l, q1l, h2l, q2l, h1r, q1r, h2r, q2r, deta2, g, r)
    gh1 = g * hb1
    gh2 = g * hb2
    l1, l2, l3, l4, hyp, cq = eigenvalues_roe(u1, u2, hb1, hb2, g, r)
    smax = max(abs(l1), abs(l4))
    if hyp == ZERO:
        chi = math.sqrt(max(cq, ZERO))
        if l2 < ZERO:
            chi = -chi
        d0, d1, d2, d3 = _pvm(r0, r1, r2, r3, h1r - h1l, q1r - q1l, deta2, q2r - q2l,
                              dH, u1, u2, gh1, gh2, r, l1, l4, chi)
        return d0, d1, d2, d3, r0, r1, r2, r3, smax, ZERO
    # first-order speeds of the two states: the entropy fix's delta
    la1, la2, la3, la4 = speeds_first_order(h1l, u1l, h2l, u2l, g, r)
    lb1, lb2, lb3, lb4 = speeds_first_order(h1r, u1r, h2r, u2r, g, r)
    bb = -r * gh2
    d0 = ZERO
    d1 = ZERO
    d2 = ZERO
    d3 = ZERO
    for i in range(4):
        if i == 0:
            lam = l1
            sg = _sgn_fixed(lam, la1, lb1)
        elif i == 1:
            lam = l2
            sg = _sgn_fixed(lam, la2, lb2)
        elif i == 2:
            lam = l3
            sg = _sgn_fixed(lam, la3, lb3)
        else:
            lam = l4
            sg = _sgn_fixed(lam, la4, lb4)
        dl = lam - u1
        k = ONE - dl * dl / gh1
        dd = gh1 * k
        norm = TWO * bb * dl - TWO * dd * k * (lam - u2)
        alpha = ((lam - TWO * u1) * bb * r0 + bb * r1
                 + (lam - TWO * u2) * dd * r2 + dd * r3) / norm
        phi = HALF * (ONE - sg) * alpha
        d0 += phi
        d1 += phi * lam
        d2 -= phi * k
        d3 -= phi * k * lam
    return d0, d1, d2, d3, r0, r1, r2, r3, smax, ONE


@numba.njit
def fluctuation_ifcp(h1l, q1l, h2l, q2l, h1r, q1r, h2r, q2r, deta2, dH, g, r):
    """IFCP's left-going fluctuation, same outputs as :func:`fluctuation_irroe`."""
    r0, r1, r2, r3, hb1, hb2, u1, u2, u1l, u1r, u2l, u2r = _jump(
        h1l, q1l, h2l, q2l, h1r, q1r, h2r, q2r, deta2, g, r)
    e1, i1, i2, e4 = speeds_first_order(hb1, u1, hb2, u2, g, r)
    sint = i1 + i2
    chi = max(abs(i1), abs(i2))
    if sint < ZERO:
        chi = -chi
    d0, d1, d2, d3 = _pvm(r0, r1, r2, r3, h1r - h1l, q1r - q1l, deta2, q2r - q2l,
                          dH, u1, u2, g * hb1, g * hb2, r, e1, e4, chi)
    return d0, d1, d2, d3, r0, r1, r2, r3, max(abs(e1), abs(e4)), ONE


@numba.njit
def _assemble(d0, d1, d2, d3, r1, r3, q1l, v1l, q2l, v2l, q1r, v1r, q2r, v2r):
    """Mass fluxes, and the normal and tangential momentum fluctuations of both sides."""
    f1 = q1l + d0
    f2 = q2l + d2
    s1 = v1l if f1 > ZERO else v1r
    s2 = v2l if f2 > ZERO else v2r
    t1 = f1 * s1
    t2 = f2 * s2
    return (f1, f2,
            d1, t1 - q1l * v1l, d3, t2 - q2l * v2l,
            r1 - d1, q1r * v1r - t1, r3 - d3, q2r * v2r - t2)


@numba.njit
def flux_edge_irroe(h1l, q1l, p1l, h2l, q2l, p2l, Hl, h1r, q1r, p1r, h2r, q2r, p2r, Hr,
                    g, r):
    """The seed's projected flux at one edge (IR-Roe): normal momenta ``q``, tangential
    momenta ``p`` of each layer on both sides, bottom depths ``H``.

    Returns ``(f1, f2, m1n, m1t, m2n, m2t, n1n, n1t, n2n, n2t, smax, hyperbolic)``:
    the mass fluxes of the layers (left to right), the left cell's momentum
    fluctuations (normal, tangential, per layer), the right cell's, the largest speed
    and 1 (0 where IFCP's matrix stood in).
    """
    deta2 = (h2r - Hr) - (h2l - Hl)
    d0, d1, d2, d3, r0, r1, r2, r3, smax, hyp = fluctuation_irroe(
        h1l, q1l, h2l, q2l, h1r, q1r, h2r, q2r, deta2, Hr - Hl, g, r)
    out = _assemble(d0, d1, d2, d3, r1, r3, q1l, p1l / h1l, q2l, p2l / h2l,
                    q1r, p1r / h1r, q2r, p2r / h2r)
    return out + (smax, hyp)


@numba.njit
def flux_edge_ifcp(h1l, q1l, p1l, h2l, q2l, p2l, Hl, h1r, q1r, p1r, h2r, q2r, p2r, Hr,
                   g, r):
    """As :func:`flux_edge_irroe`, with IFCP's viscosity matrix."""
    deta2 = (h2r - Hr) - (h2l - Hl)
    d0, d1, d2, d3, r0, r1, r2, r3, smax, hyp = fluctuation_ifcp(
        h1l, q1l, h2l, q2l, h1r, q1r, h2r, q2r, deta2, Hr - Hl, g, r)
    out = _assemble(d0, d1, d2, d3, r1, r3, q1l, p1l / h1l, q2l, p2l / h2l,
                    q1r, p1r / h1r, q2r, p2r / h2r)
    return out + (smax, hyp)


# --- one source, two targets, two precisions -------------------------------------------

_CACHE: dict = {}


def retyped(func, subs: dict, compile, cache: dict, top: bool = True):
    """``compile(py, top)`` of a copy of ``func`` whose module globals named in ``subs``
    are replaced (constants, or functions standing in for a placeholder), and whose
    ``numba.njit`` callees are, recursively, such copies too (``top=False``); cached per
    Python function in ``cache`` (one cache per set of substitutions)."""
    py = func.py_func if isinstance(func, CPUDispatcher) else func
    done = cache.get(py)
    if done is not None:
        return done
    g = dict(py.__globals__)
    g.update(subs)
    for name in py.__code__.co_names:
        v = g.get(name)
        if isinstance(v, CPUDispatcher):
            g[name] = retyped(v, subs, compile, cache, top=False)
    py2 = types.FunctionType(py.__code__, g, py.__name__, py.__defaults__, py.__closure__)
    py2.__qualname__ = py.__qualname__
    py2.__module__ = py.__module__
    done = cache[py] = compile(py2, top)
    return done


def constants(dtype) -> dict:
    """The module constants typed as ``dtype`` (the substitutions of FP32 arithmetic)."""
    f = np.dtype(dtype).type
    return {"ZERO": f(0.0), "HALF": f(0.5), "ONE": f(1.0), "TWO": f(2.0), "FOUR": f(4.0),
            "REAL": numba.from_dtype(np.dtype(dtype))}


def specialised(func, dtype=np.float64, target: str = "cpu"):
    """``func`` (a function of this module) compiled for ``target`` (``"cpu"``: Numba,
    ``"cuda"``: a Numba-CUDA device function) with its arithmetic in ``dtype``
    (``float64``, or ``float32``: every constant retyped, so that FP32 inputs stay FP32).
    Cached per (function, dtype, target)."""
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float64), np.dtype(np.float32)):
        raise ValueError(f"dtype must be float64 or float32, not {dtype}")
    if target not in ("cpu", "cuda"):
        raise ValueError(f"target must be 'cpu' or 'cuda', not {target!r}")
    key = (dtype.char, target)
    cache = _CACHE.setdefault(key, {})
    if dtype == np.float64 and target == "cpu":
        return func
    if target == "cpu":
        def compile(py, top):
            return numba.njit(py)
    else:
        from numba import cuda

        def compile(py, top):
            return cuda.jit(device=True)(py)
    return retyped(func, constants(dtype), compile, cache)
