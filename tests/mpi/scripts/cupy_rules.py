"""CuPy's stricter rules in Numba's CUDA simulator, for the GPU backend's code paths.

In the simulator the GPU backend's array module is NumPy, which accepts what CuPy
refuses, so a GPU-only failure of a real device can pass there.  :func:`install` gives
the simulator's GPU backends (and :func:`forestpy.backend.array_module`) a NumPy whose
``where`` follows CuPy's: the condition must be an array (CuPy converts it with
``condition.astype(bool)``), so a host comparison (a Python ``bool``) fails as on a GPU
with ``AttributeError: 'bool' object has no attribute 'astype'`` (issue 36's crash).
"""

import types

import numpy as np


class CupyRules(types.ModuleType):
    """NumPy, with CuPy's rule for ``where``."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def where(condition, x=None, y=None):
        if x is None and y is None:
            return np.where(condition)
        condition = condition.astype(bool)  # as cupy.where does: arrays only
        return np.where(condition, x, y)


RULES = CupyRules("cupy_rules")


def install():
    """From now on (this process): the simulator's GPU backends use :data:`RULES` as
    their array module, and ``array_module`` returns it for every NumPy array (the
    modules that imported the function by name included)."""
    import sys

    import forestpy.backend as backend

    if getattr(backend, "_cupy_rules", False):
        return
    original = backend.array_module

    def array_module(a):
        xp = original(a)
        return RULES if xp is np else xp

    init = backend.GPUBackend.__init__

    def gpu_init(self, *args, **kw):
        init(self, *args, **kw)
        if self.simulator:
            self.xp = RULES

    backend.GPUBackend.__init__ = gpu_init
    backend.array_module = array_module  # modules imported later bind this one
    for module in list(sys.modules.values()):
        if module is not backend and getattr(module, "array_module", None) is original:
            module.array_module = array_module
    backend._cupy_rules = True
