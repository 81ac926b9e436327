"""Initial states (h, z, extent) shared by the HWFV1 tests on the CPU and the GPU."""

import numpy as np


def circular_state(n=32):
    """A circular dam break over a flat bed (wet everywhere)."""
    c = -20.0 + (np.arange(n) + 0.5) * 40.0 / n
    h = np.where(np.hypot(c[None, :], c[:, None]) < 2.5, 2.5, 0.5)
    return h, np.zeros_like(h), (-20.0, 20.0, -20.0, 20.0)


def beach_state(n=32):
    """A dam break over a rough bed with a dry hump: wet/dry leaves."""
    x = (np.arange(n) + 0.5) * 32.0 / n
    X, Y = np.meshgrid(x, x)
    z = (0.3 * np.exp(-((X - 20.0) ** 2 + (Y - 16.0) ** 2) / 30.0)
         + 0.002 * np.random.default_rng(3).random((n, n)))
    h = np.maximum(0.0, np.where(X < 8.0, 1.0, 0.25) - z)
    return h, z, (0.0, 32.0, 0.0, 32.0)


def tree_masks(sig, L):
    """(in_tree, leaf) over the ``mra.ntotal(L)`` nodes, from the significance flags
    ``sig`` of the nodes above the finest level: a node is in the tree when its parent
    is significant (the root always), a leaf when it is in the tree and not significant
    itself."""
    from forestpy.solvers.hwfv1 import mra

    in_tree = np.zeros(mra.ntotal(L), dtype=bool)
    in_tree[0] = True
    for n in range(1, L + 1):
        o, op = mra.offset(n), mra.offset(n - 1)
        in_tree[o:o + 4**n] = np.repeat(sig[op:op + 4 ** (n - 1)], 4)
    leaf = in_tree.copy()
    leaf[:mra.offset(L)] &= ~sig
    return in_tree, leaf
