"""First-order finite volumes for shallow water: HLL fluxes with hydrostatic
reconstruction (Audusse et al. 2004, the wet/dry-safe form also used by Liang & Marche
2009), point-implicit Manning friction, CFL-limited time step.  One flux routine serves
the uniform baseline (:func:`step_uniform`) and the adaptive leaves (solvers.hwfv1.solver).
"""

import math

import numba
import numpy as np

__all__ = ["step_uniform", "dt_uniform", "TOL_DRY"]

TOL_DRY = 1e-3  # depth below which a cell has no velocity


@numba.njit(cache=True, inline="always")
def _vel(h, q):
    return q / h if h > TOL_DRY else 0.0


@numba.njit(cache=True)
def face_flux(hL, unL, utL, zL, hR, unR, utR, zR, g):
    """HLL flux normal to a face between states (h, u_normal, u_tangential, z) with
    hydrostatic reconstruction.  Returns (F_h, F_un, F_ut, corrL, corrR): the momentum
    flux seen by the left cell is F_un + corrL, by the right cell F_un + corrR."""
    zf = max(zL, zR)
    hl = max(0.0, hL + zL - zf)
    hr = max(0.0, hR + zR - zf)
    corrL = 0.5 * g * (hL * hL - hl * hl)
    corrR = 0.5 * g * (hR * hR - hr * hr)
    if hl <= TOL_DRY and hr <= TOL_DRY:
        return 0.0, 0.0, 0.0, corrL, corrR
    if hl <= TOL_DRY:
        unL = 0.0
        utL = 0.0
    if hr <= TOL_DRY:
        unR = 0.0
        utR = 0.0
    cl = math.sqrt(g * hl)
    cr = math.sqrt(g * hr)
    ustar = 0.5 * (unL + unR) + cl - cr
    cstar = 0.5 * (cl + cr) + 0.25 * (unL - unR)
    if hl <= TOL_DRY:
        sL = unR - 2.0 * cr
        sR = unR + cr
    elif hr <= TOL_DRY:
        sL = unL - cl
        sR = unL + 2.0 * cl
    else:
        sL = min(unL - cl, ustar - cstar)
        sR = max(unR + cr, ustar + cstar)
    fl0 = hl * unL
    fl1 = hl * unL * unL + 0.5 * g * hl * hl
    fr0 = hr * unR
    fr1 = hr * unR * unR + 0.5 * g * hr * hr
    if sL >= 0.0:
        f0, f1 = fl0, fl1
    elif sR <= 0.0:
        f0, f1 = fr0, fr1
    else:
        r = 1.0 / (sR - sL)
        f0 = (sR * fl0 - sL * fr0 + sL * sR * (hr - hl)) * r
        f1 = (sR * fl1 - sL * fr1 + sL * sR * (hr * unR - hl * unL)) * r
    f2 = f0 * (utL if f0 >= 0.0 else utR)
    return f0, f1, f2, corrL, corrR


@numba.njit(cache=True, inline="always")
def friction(h, qx, qy, dt, g, n_manning):
    """Point-implicit Manning friction on the discharges."""
    if n_manning <= 0.0 or h <= TOL_DRY:
        return qx, qy
    speed = math.sqrt(qx * qx + qy * qy) / h
    f = 1.0 + dt * g * n_manning * n_manning * speed / h ** (4.0 / 3.0)
    return qx / f, qy / f


@numba.njit(cache=True, inline="always")
def ghost(h, qx, qy, z, normal_x, wall):
    """Outside state beyond a boundary face: reflection (wall) or copy (open)."""
    if wall:
        if normal_x:
            return h, -qx, qy, z
        return h, qx, -qy, z
    return h, qx, qy, z


WALL, OPEN, INFLOW = 1, 0, 2  # boundary kinds of ghost_bc


@numba.njit(cache=True, inline="always")
def ghost_bc(h, qx, qy, z, normal_x, kind, eta_in, g):
    """Outside state beyond a boundary face of kind WALL, OPEN or INFLOW.  INFLOW (a
    west side) generates the incident surface elevation ``eta_in`` (above still water
    at z = 0) and absorbs outgoing waves: the ghost state joins the incoming Riemann
    invariant of the incident simple wave, u + 2c with u_in = 2 (c_in - c_0), to the
    outgoing one of the inside cell, u - 2c.  Dry cells (still water depth 0) get a
    dry ghost."""
    if kind == INFLOW:
        h0 = max(0.0, -z)
        if h0 <= TOL_DRY:
            return 0.0, 0.0, 0.0, z
        c0 = math.sqrt(g * h0)
        cin = math.sqrt(g * max(0.0, h0 + eta_in))
        rplus = 2.0 * (cin - c0) + 2.0 * cin
        rminus = _vel(h, qx) - 2.0 * math.sqrt(g * h)
        cg = max(0.0, 0.25 * (rplus - rminus))
        hg = cg * cg / g
        return hg, hg * 0.5 * (rplus + rminus), hg * _vel(h, qy), z
    return ghost(h, qx, qy, z, normal_x, kind == WALL)


@numba.njit(cache=True)
def cell_update(c, e, w, n, s, dx, dy, dt, g, n_manning, out):
    """New (h, qx, qy) of a cell from its state ``c`` and its east, west, north and
    south neighbours (each (h, qx, qy, z)); writes ``out[0:3]``."""
    h, qx, qy, z = c[0], c[1], c[2], c[3]
    u = _vel(h, qx)
    v = _vel(h, qy)
    # east face: cell on the left
    f0, f1, f2, cl, cr = face_flux(h, u, v, z, e[0], _vel(e[0], e[1]), _vel(e[0], e[2]),
                                   e[3], g)
    dh = -(f0) / dx
    dqx = -(f1 + cl) / dx
    dqy = -(f2) / dx
    f0, f1, f2, cl, cr = face_flux(w[0], _vel(w[0], w[1]), _vel(w[0], w[2]), w[3],
                                   h, u, v, z, g)
    dh += f0 / dx
    dqx += (f1 + cr) / dx
    dqy += f2 / dx
    f0, f1, f2, cl, cr = face_flux(h, v, u, z, n[0], _vel(n[0], n[2]), _vel(n[0], n[1]),
                                   n[3], g)
    dh -= f0 / dy
    dqy -= (f1 + cl) / dy
    dqx -= f2 / dy
    f0, f1, f2, cl, cr = face_flux(s[0], _vel(s[0], s[2]), _vel(s[0], s[1]), s[3],
                                   h, v, u, z, g)
    dh += f0 / dy
    dqy += (f1 + cr) / dy
    dqx += f2 / dy
    hn = max(0.0, h + dt * dh)
    qxn = qx + dt * dqx
    qyn = qy + dt * dqy
    if hn <= TOL_DRY:
        qxn = 0.0
        qyn = 0.0
    qxn, qyn = friction(hn, qxn, qyn, dt, g, n_manning)
    out[0] = hn
    out[1] = qxn
    out[2] = qyn


@numba.njit(cache=True, inline="always")
def wave_speed(h, qx, qy, g):
    if h <= TOL_DRY:
        return 0.0
    return max(abs(qx), abs(qy)) / h + math.sqrt(g * h)


@numba.njit(cache=True, parallel=True)
def dt_uniform(q, z, dx, dy, g, cfl):
    """CFL-limited step on a uniform grid ``q[3, ny, nx]``."""
    ny, nx = z.shape
    smax = np.zeros(ny)
    for j in numba.prange(ny):
        m = 0.0
        for i in range(nx):
            m = max(m, wave_speed(q[0, j, i], q[1, j, i], q[2, j, i], g))
        smax[j] = m
    return cfl * min(dx, dy) / max(smax.max(), 1e-300)


@numba.njit(cache=True, inline="always")
def uniform_cell(q, z, j, i, dx, dy, dt, g, n_manning, bc, eta_in, c, e, w, n, s, out):
    """New (h, qx, qy) of cell ``(j, i)`` of the uniform grid ``q[3, ny, nx]`` (bed ``z``)
    to ``out``, its neighbours or their ghost states (:func:`ghost_bc`) gathered into the
    scratch ``c, e, w, n, s``.  The body of :func:`step_uniform` and of the GPU's
    uniform kernel (:mod:`.gpu`)."""
    ny, nx = z.shape
    c[0], c[1], c[2], c[3] = q[0, j, i], q[1, j, i], q[2, j, i], z[j, i]
    if i + 1 < nx:
        e[0], e[1], e[2], e[3] = q[0, j, i + 1], q[1, j, i + 1], q[2, j, i + 1], z[j, i + 1]
    else:
        e[0], e[1], e[2], e[3] = ghost_bc(c[0], c[1], c[2], c[3], True, bc[1], eta_in, g)
    if i > 0:
        w[0], w[1], w[2], w[3] = q[0, j, i - 1], q[1, j, i - 1], q[2, j, i - 1], z[j, i - 1]
    else:
        w[0], w[1], w[2], w[3] = ghost_bc(c[0], c[1], c[2], c[3], True, bc[0], eta_in, g)
    if j + 1 < ny:
        n[0], n[1], n[2], n[3] = q[0, j + 1, i], q[1, j + 1, i], q[2, j + 1, i], z[j + 1, i]
    else:
        n[0], n[1], n[2], n[3] = ghost_bc(c[0], c[1], c[2], c[3], False, bc[3], eta_in, g)
    if j > 0:
        s[0], s[1], s[2], s[3] = q[0, j - 1, i], q[1, j - 1, i], q[2, j - 1, i], z[j - 1, i]
    else:
        s[0], s[1], s[2], s[3] = ghost_bc(c[0], c[1], c[2], c[3], False, bc[2], eta_in, g)
    cell_update(c, e, w, n, s, dx, dy, dt, g, n_manning, out)


@numba.njit(cache=True, parallel=True)
def step_uniform(q, z, qn, dx, dy, dt, g, n_manning, bc, eta_in):
    """One FV1 step on the uniform grid: ``q[3, ny, nx]`` -> ``qn``.  ``bc`` is
    (west, east, south, north) of WALL, OPEN or INFLOW (see :func:`ghost_bc`, with the
    incident surface elevation ``eta_in``)."""
    ny, nx = z.shape
    for j in numba.prange(ny):
        c = np.empty(4)
        e = np.empty(4)
        w = np.empty(4)
        n = np.empty(4)
        s = np.empty(4)
        out = np.empty(3)
        for i in range(nx):
            uniform_cell(q, z, j, i, dx, dy, dt, g, n_manning, bc, eta_in, c, e, w, n, s, out)
            qn[0, j, i] = out[0]
            qn[1, j, i] = out[1]
            qn[2, j, i] = out[2]
