"""Random forests and masks shared by the patch tests (ghost fill, time sync, regrid,
their GPU paths)."""

import numpy as np

from forestpy.forest import Forest


def random_forest(conn, rng, base=1, rounds=3, frac=0.3):
    """A 2:1-balanced forest: ``rounds`` times refine a random ``frac`` of the leaves of
    the uniform level-``base`` forest, then balance (``rng``: a seed or a Generator)."""
    rng = np.random.default_rng(rng)
    f = Forest.new(conn, base)
    for _ in range(rounds):
        f = f.refine(rng.random(f.n) < frac)
    return f.balance()


def refined_forest(conn, seed, base=1, nrefine=1):
    """The uniform level-``base`` forest with ``nrefine`` random leaves refined, balanced."""
    rng = np.random.default_rng(seed)
    f = Forest.new(conn, base)
    flags = np.zeros(f.n, dtype=bool)
    flags[rng.choice(f.n, nrefine, replace=False)] = True
    return f.refine(flags).balance()


def interior_mask(geom):
    """(NY, NX): the interior cells of a padded patch."""
    m = np.zeros(geom.shape, dtype=bool)
    b = geom.mbc
    m[b : b + geom.my, b : b + geom.mx] = True
    return m
