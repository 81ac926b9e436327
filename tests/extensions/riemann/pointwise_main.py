"""Frozen copy of the pointwise shallow-water solvers as they were on main at 9fcec3c
(2026-11-28), before the work-sharing contract (issue 32): the reference that the
composed ``rpn2``/``rpt2`` of today's solvers must equal bitwise
(``test_work_sharing.py``).  Do not edit: it is the "before" of that proof."""

import math

import numba

_ZERO_SPEED = 1e-14

@numba.njit
def sqrt_or_nan(x):
    """``sqrt(x)`` for ``x >= 0`` and NaN otherwise (also for NaN input)."""
    if x >= 0.0:
        return math.sqrt(x)
    return math.nan


@numba.njit
def velocity(h, hu):
    """``hu / h`` for ``h > 0``, ``0`` for a dry state ``h == 0``, NaN otherwise."""
    if h > 0.0:
        return hu / h
    if h == 0.0:
        return 0.0
    return math.nan


@numba.njit
def harten_hyman_left(s, lam_l, lam_r):
    """Coefficient of the left-going part of the fluctuation ``s * W`` of one wave.

    Harten and Hyman (1983): when the characteristic speed crosses zero across the
    wave (``lam_l < 0 < lam_r``, a transonic rarefaction) the wave is split at the
    sonic point, giving ``lam_l (lam_r - s) / (lam_r - lam_l)``; otherwise the usual
    ``min(s, 0)``.  The right-going coefficient is ``s`` minus this value, so the
    fluctuations still add up to ``s * W``.
    """
    if lam_l < 0.0 and lam_r > 0.0:
        return lam_l * (lam_r - s) / (lam_r - lam_l)
    return min(s, 0.0)


@numba.njit
def fill_zero_normal(wave, s, amdq, apdq):
    """Set every output of a normal solve to zero."""
    for m in range(wave.shape[0]):
        amdq[m] = 0.0
        apdq[m] = 0.0
        for p in range(wave.shape[1]):
            wave[m, p] = 0.0
    for p in range(s.shape[0]):
        s[p] = 0.0


@numba.njit
def fill_nan_normal(wave, s, amdq, apdq):
    """Set every output of a normal solve to NaN (non-physical input states)."""
    for m in range(wave.shape[0]):
        amdq[m] = math.nan
        apdq[m] = math.nan
        for p in range(wave.shape[1]):
            wave[m, p] = math.nan
    for p in range(s.shape[0]):
        s[p] = math.nan


@numba.njit
def fill_nan_transverse(bmasdq, bpasdq):
    """Set both outputs of a transverse solve to NaN (non-physical input states)."""
    for m in range(bmasdq.shape[0]):
        bmasdq[m] = math.nan
        bpasdq[m] = math.nan


@numba.njit
def transverse_split(un, ut, c, asdq, mn, mt):
    """Shallow-water transverse splitting of ``asdq`` at the state ``(un, ut, c)``
    (velocity across and along the interface's transverse direction, wave speed
    ``c > 0``): the eigen-decomposition on the speeds ``un - c, un, un + c``, returned
    as ``bmasdq`` (entries 0, ``mn``, ``mt``) then ``bpasdq``.  Roe, HLLE and the
    GeoClaw solver's ``rpt2`` share it."""
    half_ic = 0.5 / c
    b1 = ((un + c) * asdq[0] - asdq[mn]) * half_ic
    b2 = asdq[mt] - ut * asdq[0]
    b3 = (asdq[mn] - (un - c) * asdq[0]) * half_ic
    s1 = un - c
    s2 = un
    s3 = un + c
    c1m = min(s1, 0.0) * b1
    c2m = min(s2, 0.0) * b2
    c3m = min(s3, 0.0) * b3
    c1p = max(s1, 0.0) * b1
    c2p = max(s2, 0.0) * b2
    c3p = max(s3, 0.0) * b3
    return (c1m + c3m, c1m * s1 + c3m * s3, (c1m + c3m) * ut + c2m,
            c1p + c3p, c1p * s1 + c3p * s3, (c1p + c3p) * ut + c2p)


@numba.njit
def fill_trivial_normal(hl, hr, drytol, wave, s, amdq, apdq):
    """The two cases every shallow-water normal solve settles first: a negative (or NaN)
    depth gives NaN (:func:`fill_nan_normal`), two dry states (depth <= ``drytol``)
    give nothing (:func:`fill_zero_normal`).  Returns True when it filled the outputs
    (the solver then returns)."""
    if not (hl >= 0.0 and hr >= 0.0):
        fill_nan_normal(wave, s, amdq, apdq)
        return True
    if hl <= drytol and hr <= drytol:
        fill_zero_normal(wave, s, amdq, apdq)
        return True
    return False


@numba.njit
def roe_state(ql, qr, grav, mn, mt):
    """Roe averages ``(un, ut, c)``, ``sqrt(h)`` of both states and its inverse
    (zero for a dry state): ``(un, ut, c, sl, sr, 1/sl, 1/sr)``.

    Both depths must be ``>= 0`` (checked by the callers); dry states get zero
    velocity.  Uses ``sqrt(h) u = hu / sqrt(h)``, so only three divisions are needed.
    """
    hl = ql[0]
    hr = qr[0]
    sl = math.sqrt(hl)
    sr = math.sqrt(hr)
    isl = 1.0 / sl if hl > 0.0 else 0.0
    isr = 1.0 / sr if hr > 0.0 else 0.0
    den = sl + sr
    iden = 1.0 / den if den > 0.0 else 0.0
    un = (ql[mn] * isl + qr[mn] * isr) * iden
    ut = (ql[mt] * isl + qr[mt] * isr) * iden
    c = math.sqrt(0.5 * grav * (hl + hr))
    return un, ut, c, sl, sr, isl, isr


@numba.njit
def roe_averages(ql, qr, grav, mn, mt):
    """Roe averages ``(un, ut, c)`` of two shallow-water states.

    ``mn`` is the index of the momentum normal to the splitting direction and ``mt``
    the other one.  Both depths must be ``>= 0``; two dry states give zeros.
    """
    un, ut, c, _, _, _, _ = roe_state(ql, qr, grav, mn, mt)
    return un, ut, c


@numba.njit
def roe_transverse_split(ixy, ql, qr, grav, asdq, bmasdq, bpasdq):
    """Split ``asdq`` into the transverse Roe eigenvectors (shared by Roe and HLLE).

    For ``ixy == 1`` the transverse direction is y: the speeds are ``v - c, u, v + c``
    with the Roe averages ``u, v, c`` of ``ql`` and ``qr``.
    """
    if not (ql[0] >= 0.0 and qr[0] >= 0.0):
        fill_nan_transverse(bmasdq, bpasdq)
        return
    mt = ixy  # momentum along the interface normal: tangential to the transverse dir.
    mn = 3 - ixy  # momentum in the transverse direction
    un, ut, c, _, _, _, _ = roe_state(ql, qr, grav, mn, mt)
    if c == 0.0:
        for m in range(3):
            bmasdq[m] = 0.0
            bpasdq[m] = 0.0
        return
    bmasdq[0], bmasdq[mn], bmasdq[mt], bpasdq[0], bpasdq[mn], bpasdq[mt] = transverse_split(
        un, ut, c, asdq, mn, mt)


def rpn2_shallow_roe(ixy, ql, qr, auxl, auxr, params, wave, s, amdq, apdq):
    """Normal solve: Roe linearisation, 3 waves, Harten-Hyman entropy fix."""
    grav = params[0]
    hl = ql[0]
    hr = qr[0]
    if fill_trivial_normal(hl, hr, 0.0, wave, s, amdq, apdq):
        return
    mu = ixy
    mv = 3 - ixy
    u, v, c, sl, sr, isl, isr = roe_state(ql, qr, grav, mu, mv)

    dh = hr - hl
    dhu = qr[mu] - ql[mu]
    dhv = qr[mv] - ql[mv]
    half_ic = 0.5 / c
    a1 = ((u + c) * dh - dhu) * half_ic
    a2 = dhv - v * dh
    a3 = (dhu - (u - c) * dh) * half_ic

    wave[0, 0] = a1
    wave[mu, 0] = a1 * (u - c)
    wave[mv, 0] = a1 * v
    s[0] = u - c

    wave[0, 1] = 0.0
    wave[mu, 1] = 0.0
    wave[mv, 1] = a2
    s[1] = u

    wave[0, 2] = a3
    wave[mu, 2] = a3 * (u + c)
    wave[mv, 2] = a3 * v
    s[2] = u + c

    # Harten-Hyman acts only where the characteristic speed changes sign across a
    # wave: evaluate the outer state first (sqrt(g h) = sqrt(g) sqrt(h) is free) and
    # the state inside the fan only when the outer speed allows a sign change.
    sqrt_g = math.sqrt(grav)
    # 1-family: speed u - sqrt(g h) left of the wave (ql) and right of it (ql + W1)
    k1 = min(s[0], 0.0)
    lam_l = ql[mu] * isl * isl - sqrt_g * sl  # u - sqrt(g h) of ql (0 velocity if dry)
    if lam_l < 0.0:
        h1 = hl + wave[0, 0]
        lam_r = velocity(h1, ql[mu] + wave[mu, 0]) - sqrt_or_nan(grav * h1)
        k1 = harten_hyman_left(s[0], lam_l, lam_r)
    # 2-family: linearly degenerate
    k2 = min(s[1], 0.0)
    # 3-family: u + sqrt(g h) left of the wave (qr - W3) and right of it (qr)
    k3 = min(s[2], 0.0)
    lam_r = qr[mu] * isr * isr + sqrt_g * sr
    if lam_r > 0.0:
        h2 = hr - wave[0, 2]
        lam_l = velocity(h2, qr[mu] - wave[mu, 2]) + sqrt_or_nan(grav * h2)
        k3 = harten_hyman_left(s[2], lam_l, lam_r)

    for m in range(3):
        amdq[m] = k1 * wave[m, 0] + k2 * wave[m, 1] + k3 * wave[m, 2]
        apdq[m] = (s[0] - k1) * wave[m, 0] + (s[1] - k2) * wave[m, 1] + (s[2] - k3) * wave[m, 2]


def rpt2_shallow_roe(ixy, imp, ql, qr, aux1, aux2, aux3, params, asdq, bmasdq, bpasdq):
    """Transverse solve: Roe eigen-decomposition in the transverse direction."""
    roe_transverse_split(ixy, ql, qr, params[0], asdq, bmasdq, bpasdq)


def rpn2_shallow_hlle(ixy, ql, qr, auxl, auxr, params, wave, s, amdq, apdq):
    """Normal solve: HLLE, two waves around one middle state."""
    grav = params[0]
    hl = ql[0]
    hr = qr[0]
    if fill_trivial_normal(hl, hr, 0.0, wave, s, amdq, apdq):
        return
    mu = ixy
    mv = 3 - ixy
    uhat, vhat, chat = roe_averages(ql, qr, grav, mu, mv)
    ul = velocity(hl, ql[mu])
    vl = velocity(hl, ql[mv])
    ur = velocity(hr, qr[mu])
    vr = velocity(hr, qr[mv])
    s1 = min(ul - sqrt_or_nan(grav * hl), uhat - chat)
    s2 = max(ur + sqrt_or_nan(grav * hr), uhat + chat)

    # jumps of q and of the normal flux f = (hu, hu^2 + g h^2 / 2, huv)
    dq0 = hr - hl
    dq1 = qr[mu] - ql[mu]
    dq2 = qr[mv] - ql[mv]
    df0 = dq1
    df1 = (qr[mu] * ur + 0.5 * grav * hr * hr) - (ql[mu] * ul + 0.5 * grav * hl * hl)
    df2 = qr[mu] * vr - ql[mu] * vl

    den = s2 - s1
    # W1 = q* - ql and W2 = qr - q*, written so that ql == qr gives exact zeros
    wave[0, 0] = (s2 * dq0 - df0) / den
    wave[mu, 0] = (s2 * dq1 - df1) / den
    wave[mv, 0] = (s2 * dq2 - df2) / den
    wave[0, 1] = (df0 - s1 * dq0) / den
    wave[mu, 1] = (df1 - s1 * dq1) / den
    wave[mv, 1] = (df2 - s1 * dq2) / den
    s[0] = s1
    s[1] = s2

    for m in range(3):
        amdq[m] = min(s1, 0.0) * wave[m, 0] + min(s2, 0.0) * wave[m, 1]
        apdq[m] = max(s1, 0.0) * wave[m, 0] + max(s2, 0.0) * wave[m, 1]


def rpt2_shallow_hlle(ixy, imp, ql, qr, aux1, aux2, aux3, params, asdq, bmasdq, bpasdq):
    """Transverse solve: the Roe transverse splitting shared with ``shallow_roe``."""
    roe_transverse_split(ixy, ql, qr, params[0], asdq, bmasdq, bpasdq)


@numba.njit
def riemann_structure(hl, hr, ul, ur, cl, cr, drytol, grav):
    """Middle depth ``hm`` and the speeds ``(s1m, s2m)`` of the exact Riemann solution's
    1- and 2-families next to the middle state (LeVeque 2002, section 13).

    The middle depth comes from one step of an iteration on the wave-curve function:
    Newton on ``sqrt(h)`` from ``max(hl, hr)`` for two shocks, a secant step from
    ``min(hl, hr)`` for a shock and a rarefaction, closed form for two rarefactions.
    A dry side gives ``hm = 0`` and the dry-front speed for both speeds.  ``cl, cr``
    are ``sqrt(g h)`` of the two sides (the caller has them).
    """
    hmin = min(hl, hr)
    hmax = max(hl, hr)
    du = ur - ul
    if hmin <= drytol:
        sfront = ur + ul - 2.0 * cr + 2.0 * cl
        return 0.0, sfront, sfront
    cmin = min(cl, cr)
    cmax = max(cl, cr)
    f_min = du + 2.0 * (cmin - cmax)
    f_max = du + (hmax - hmin) * math.sqrt(0.5 * grav * (hmax + hmin) / (hmax * hmin))
    if f_min > 0.0:
        # two rarefactions: the middle depth in closed form
        t = max(0.0, -du + 2.0 * (cl + cr))
        hm = t * t / (16.0 * grav)
        cm = math.sqrt(grav * hm)
        return hm, ul + 2.0 * cl - 3.0 * cm, ur - 2.0 * cr + 3.0 * cm
    if f_max <= 0.0:
        # two shocks: one Newton step on sqrt(h) from the larger depth
        h0 = hmax
        gl = math.sqrt(0.5 * grav * (1.0 / h0 + 1.0 / hl))
        gr = math.sqrt(0.5 * grav * (1.0 / h0 + 1.0 / hr))
        # sums grouped so that the mirror image of a problem rounds the same way
        f0 = du + ((h0 - hl) * gl + (h0 - hr) * gr)
        dfdh = ((gl - grav * (h0 - hl) / (4.0 * h0 * h0 * gl))
                + (gr - grav * (h0 - hr) / (4.0 * h0 * h0 * gr)))
        root = math.sqrt(h0) - f0 / (2.0 * math.sqrt(h0) * dfdh)
        hm = root * root
        u1m = ul - (hm - hl) * math.sqrt(0.5 * grav * (1.0 / hm + 1.0 / hl))
        u2m = ur + (hm - hr) * math.sqrt(0.5 * grav * (1.0 / hm + 1.0 / hr))
        cm = math.sqrt(grav * hm)
        return hm, u1m - cm, u2m + cm
    # a shock and a rarefaction: one secant step from the smaller depth
    hm = hmin - f_min * (hmax - hmin) / (f_max - f_min)
    cm = math.sqrt(grav * hm)
    if hl > hr:
        return hm, ul + 2.0 * cl - 3.0 * cm, ul + 2.0 * cl - cm
    return hm, ur - 2.0 * cr + cm, ur - 2.0 * cr + 3.0 * cm


@numba.njit
def augmented_fwaves(hl, hr, hul, hur, ul, ur, vl, vr, bl, br, cl, cr, se1, se2, drytol,
                     grav, mu, mv, wave, s):
    """George's augmented decomposition (one pass, GeoClaw's ``maxiter = 1``).

    Inputs are the (dry-corrected) states of both sides, their bottoms, ``sqrt(g h)``
    of both sides and the Einfeldt speeds ``se1 <= se2``; writes the f-waves
    ``wave[m, p]`` (``m``: 0 mass, ``mu`` normal momentum, ``mv`` tangential momentum)
    and their speeds ``s[p]``.
    """
    hm, s1m, s2m = riemann_structure(hl, hr, ul, ur, cl, cr, drytol, grav)
    lam1 = min(se1, s2m)
    lam3 = max(se2, s1m)
    lam2 = 0.5 * (lam1 + lam3)
    width = lam3 - lam1
    iwidth = 1.0 / width
    hstar_hll = max(((hul - hur) + (lam3 * hr - lam1 * hl)) * iwidth, 0.0)

    crit = max(drytol * grav, 1e-6)
    hbar = 0.5 * (hl + hr)
    ghbar = grav * hbar
    usum2 = 0.25 * (ul + ur) * (ul + ur)
    s1s2bar = usum2 - ghbar
    s1s2tilde = max(0.0, ul * ur) - ghbar
    db = br - bl
    sonic = (abs(s1s2bar) <= crit
             or s1s2bar * s1s2tilde <= crit * crit
             or s1s2bar * lam1 * lam3 <= crit * crit)
    if not sonic:
        crit_sqrt = math.sqrt(crit)
        sonic = (min(abs(lam1), abs(lam3)) < crit_sqrt
                 or (lam1 < crit_sqrt and s1m > -crit_sqrt)
                 or (lam3 > -crit_sqrt and s2m < crit_sqrt)
                 or (ul + cl) * (ur + cr) < 0.0
                 or (ul - cl) * (ur - cr) < 0.0)

    dh = hr - hl
    deta = (hr + br) - (hl + bl)
    # the steady wave's depth jump: -db (+ a part that vanishes with the velocities)
    if sonic:
        excess_h = 0.0
        excess_phi = 0.0
    else:
        ibar = 1.0 / s1s2bar
        excess_h = db * usum2 * ibar
        excess_phi = -db * ghbar * (s1s2tilde - s1s2bar) * ibar
    ddh = excess_h - db
    bounded = ddh
    if lam1 < -crit and lam3 > crit:
        bounded = min(bounded, hstar_hll * width / lam3)
        bounded = max(bounded, hstar_hll * width / lam1)
    elif lam1 >= crit:
        bounded = min(bounded, hstar_hll * width / lam1)
        bounded = max(bounded, -hl)
    elif lam3 <= -crit:
        bounded = min(bounded, hr)
        bounded = max(bounded, hstar_hll * width / lam3)
    d1 = deta - excess_h if bounded == ddh else dh - bounded

    # the steady wave's momentum-flux jump: -g hbar db (+ a part that vanishes at rest)
    ddphi = excess_phi - ghbar * db
    bounded = min(ddphi, grav * max(-hl * db, -hr * db))
    bounded = max(bounded, grav * min(-hl * db, -hr * db))
    dkin = hur * ur - hul * ul
    if bounded == ddphi:
        # dphi - ddphi = g hbar (dh + db) + dkin - excess_phi, with dh + db = deta
        d3 = ghbar * deta + dkin - excess_phi
    else:
        d3 = ghbar * dh + dkin - bounded
    d2 = hur - hul

    beta1 = (lam3 * d1 - d2) * iwidth
    beta3 = (d2 - lam1 * d1) * iwidth
    beta2 = d3 - (beta1 * lam1 * lam1 + beta3 * lam3 * lam3)

    for p in range(3):
        wave[0, p] = 0.0
        wave[mu, p] = 0.0
        wave[mv, p] = 0.0
    wave[0, 0] = beta1 * lam1
    wave[mu, 0] = beta1 * lam1 * lam1
    wave[mv, 0] = beta1 * lam1 * vl
    wave[mu, 1] = beta2
    wave[0, 2] = beta3 * lam3
    wave[mu, 2] = beta3 * lam3 * lam3
    wave[mv, 2] = beta3 * lam3 * vr
    # the rest of the tangential momentum flux jump goes downstream of the interface
    rest = (hur * vr - hul * vl) - (wave[mv, 0] + wave[mv, 2])
    if hul + wave[0, 0] <= 0.0:
        wave[mv, 0] += rest
    else:
        wave[mv, 2] += rest
    s[0] = lam1
    s[1] = lam2
    s[2] = lam3


@numba.njit
def split_fwaves(wave, s, amdq, apdq, zero_speed):
    """``amdq``/``apdq`` = sums of the f-waves by the sign of their speed (half each
    for a speed within ``zero_speed`` of zero, so that ``amdq + apdq`` is the sum of
    the waves)."""
    for m in range(3):
        a = 0.0
        b = 0.0
        for p in range(3):
            z = wave[m, p]
            if s[p] < -zero_speed:
                a += z
            elif s[p] > zero_speed:
                b += z
            else:
                a += 0.5 * z
                b += 0.5 * z
        amdq[m] = a
        apdq[m] = b


@numba.njit
def _side(h, hun, hut, b, drytol):
    """One side of an interface for the solve: ``(h, hu, u, v, b)`` with the normal and
    tangential momenta ``hun, hut``; a dry cell has no water, no velocity, and its film
    counts as ground (so a lake beside a filmed bank stays at rest)."""
    if h > drytol:
        return h, hun, hun / h, hut / h, b
    return 0.0, 0.0, 0.0, 0.0, b + h


def rpn2_geoclaw(ixy, ql, qr, auxl, auxr, params, wave, s, amdq, apdq):
    """Normal solve: George's augmented solver with GeoClaw's wet/dry wall rule."""
    grav = params[0]
    drytol = params[1]
    hl = ql[0]
    hr = qr[0]
    if fill_trivial_normal(hl, hr, drytol, wave, s, amdq, apdq):
        return
    mu = ixy
    mv = 3 - ixy
    hl, hul, ul, vl, bl = _side(hl, ql[mu], ql[mv], auxl[0], drytol)
    hr, hur, ur, vr, br = _side(hr, qr[mu], qr[mv], auxr[0], drytol)
    # a dry neighbour above the wet surface: a wall unless the water would climb it
    wall_left = False
    wall_right = False
    cl = math.sqrt(grav * hl)
    cr = math.sqrt(grav * hr)
    if hr == 0.0:
        hm, _, _ = riemann_structure(hl, hl, ul, -ul, cl, cl, drytol, grav)
        if max(hl, hm) + bl < br:
            wall_right = True
            hr = hl
            hur = -hul
            ur = -ul
            vr = vl
            br = bl
            cr = cl
        elif hl + bl < br:
            br = hl + bl
    elif hl == 0.0:
        hm, _, _ = riemann_structure(hr, hr, -ur, ur, cr, cr, drytol, grav)
        if max(hr, hm) + br < bl:
            wall_left = True
            hl = hr
            hul = -hur
            ul = -ur
            vl = vr
            bl = br
            cl = cr
        elif hr + br < bl:
            bl = hr + br
    # Einfeldt speeds
    uhat = (cl * ul + cr * ur) / (cl + cr)
    chat = math.sqrt(0.5 * grav * (hl + hr))
    se1 = min(ul - cl, uhat - chat)
    se2 = max(ur + cr, uhat + chat)
    if hul == 0.0 and hur == 0.0 and vl == 0.0 and vr == 0.0 and hl + bl == hr + br:
        # at rest with one surface: the decomposition below gives exactly zero waves
        # (only its speeds could differ); skipping it is the common case before a wave
        # arrives
        fill_zero_normal(wave, s, amdq, apdq)
        s[0] = se1
        s[1] = 0.5 * (se1 + se2)
        s[2] = se2
        return
    augmented_fwaves(hl, hr, hul, hur, ul, ur, vl, vr, bl, br, cl, cr, se1, se2, drytol,
                     grav, mu, mv, wave, s)
    if wall_right:
        for p in range(1, 3):
            s[p] = 0.0
            for m in range(3):
                wave[m, p] = 0.0
    if wall_left:
        for p in range(2):
            s[p] = 0.0
            for m in range(3):
                wave[m, p] = 0.0
    split_fwaves(wave, s, amdq, apdq, _ZERO_SPEED)


def rpt2_geoclaw(ixy, imp, ql, qr, aux1, aux2, aux3, params, asdq, bmasdq, bpasdq):
    """Transverse solve at the state of the receiving cell; walls of higher dry bottom."""
    grav = params[0]
    drytol = params[1]
    h = ql[0] if imp == 1 else qr[0]
    if not (ql[0] >= 0.0 and qr[0] >= 0.0):
        fill_nan_transverse(bmasdq, bpasdq)
        return
    for m in range(3):
        bmasdq[m] = 0.0
        bpasdq[m] = 0.0
    if h <= drytol:
        return
    mn = 3 - ixy  # momentum in the transverse direction
    mt = ixy  # momentum along the interface normal
    if imp == 1:
        un = ql[mn] / h
        ut = ql[mt] / h
    else:
        un = qr[mn] / h
        ut = qr[mt] / h
    c = math.sqrt(grav * h)
    eta = h + aux2[0]
    m0, mn_, mt_, p0, pn, pt = transverse_split(un, ut, c, asdq, mn, mt)
    if eta >= aux1[0]:
        bmasdq[0] = m0
        bmasdq[mn] = mn_
        bmasdq[mt] = mt_
    if eta >= aux3[0]:
        bpasdq[0] = p0
        bpasdq[mn] = pn
        bpasdq[mt] = pt
