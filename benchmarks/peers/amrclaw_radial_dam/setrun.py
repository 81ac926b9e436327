"""AMRClaw 5.14 run parameters for the radial dam break (forestpy demos/radial_dam.py).

    python setrun.py amrclaw                       # defaults: 128^2, 3 levels, tol 0.02
    RADIAL_MX=32 RADIAL_LEVELS=5 RADIAL_TOL=0.01 python setrun.py amrclaw

Shallow water, g = 1, [-2.5, 2.5]^2, walls, h = 2 inside r = 0.5 and 1 outside,
t = 1, Roe solver with entropy fix, MC limiter on all waves, order 2 and
transverse_waves 2, Courant 0.9 (max 1.0), refinement ratio 2 per level in space
and time, flag2refine on the undivided difference of h (flag2refine2.f90),
Richardson estimation off, regrid every 2 steps, buffer width 3, clustering 0.7.
Output only at the final time (no frame at t0).
"""

import os

from clawpack.clawutil import data


def setrun(claw_pkg="amrclaw", mx=None, levels=None, tol=None, output_format="ascii"):
    assert claw_pkg.lower() == "amrclaw", "Expected claw_pkg = 'amrclaw'"
    mx = int(mx if mx is not None else os.environ.get("RADIAL_MX", 128))
    levels = int(levels if levels is not None else os.environ.get("RADIAL_LEVELS", 3))
    tol = float(tol if tol is not None else os.environ.get("RADIAL_TOL", 0.02))

    rundata = data.ClawRunData(claw_pkg, 2)
    probdata = rundata.new_UserData(name="probdata", fname="setprob.data")
    probdata.add_param("grav", 1.0, "gravitational constant")

    c = rundata.clawdata
    c.num_dim = 2
    c.lower[0], c.upper[0] = -2.5, 2.5
    c.lower[1], c.upper[1] = -2.5, 2.5
    c.num_cells[0] = c.num_cells[1] = mx
    c.num_eqn = 3
    c.num_aux = 0
    c.capa_index = 0
    c.t0 = 0.0
    c.restart = False
    c.output_style = 1
    c.num_output_times = 1
    c.tfinal = 1.0
    c.output_t0 = False
    c.output_format = output_format
    c.output_q_components = "all"
    c.output_aux_components = "none"
    c.output_aux_onlyonce = True
    c.verbosity = 0
    c.dt_variable = True
    c.dt_initial = 1.0e-4
    c.dt_max = 1.0e99
    c.cfl_desired = 0.9
    c.cfl_max = 1.0
    c.steps_max = 1000000
    c.order = 2
    c.dimensional_split = "unsplit"
    c.transverse_waves = 2
    c.num_waves = 3
    c.limiter = ["mc", "mc", "mc"]
    c.use_fwaves = False
    c.source_split = 0
    c.num_ghost = 2
    c.bc_lower[0] = c.bc_upper[0] = "wall"
    c.bc_lower[1] = c.bc_upper[1] = "wall"
    c.checkpt_style = 0

    a = rundata.amrdata
    a.amr_levels_max = levels
    # (levels = 1, a uniform grid, still needs one, unused, ratio in amr.data)
    a.refinement_ratios_x = [2] * max(levels - 1, 1)
    a.refinement_ratios_y = [2] * max(levels - 1, 1)
    a.refinement_ratios_t = [2] * max(levels - 1, 1)
    a.aux_type = []
    a.flag_richardson = False
    a.flag_richardson_tol = 1.0
    a.flag2refine = True
    a.flag2refine_tol = tol
    a.regrid_interval = 2
    a.regrid_buffer_width = 3
    a.clustering_cutoff = 0.7
    a.verbosity_regrid = 0
    rundata.regiondata.regions = []
    for flag in ("dprint", "eprint", "edebug", "gprint", "nprint", "pprint", "rprint",
                 "sprint", "tprint", "uprint"):
        setattr(a, flag, False)
    return rundata


if __name__ == "__main__":
    import sys

    setrun(*sys.argv[1:2]).write()
