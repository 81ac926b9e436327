"""Clawpack-style wave-propagation kernels (Numba), batched over patches."""

from .fluctuations import make_fluctuation_kernel
from .limiters import LIMITERS, limiter_apply, limiter_code
from .step_kernel import make_step_kernel

__all__ = ["make_step_kernel", "make_fluctuation_kernel", "LIMITERS", "limiter_apply",
           "limiter_code"]
