"""Small float64 arrays on the stack of a compiled CPU kernel (``local_vector(n)``).

The step kernel hands each pointwise solver call a few per-interface outputs (the
transverse solve's ``bmasdq``/``bpasdq``, the limited correction): as views of heap
scratch they live in memory, and since Numba cannot tell LLVM that they do not alias
the other arrays, every write goes to memory and every read after another array's
write comes back from it.  An array whose buffer is an ``alloca`` of the kernel itself
cannot alias anything; once the solver is inlined and its indices are constants, LLVM
keeps the whole array in registers (SROA).  CPU only (the CUDA kernels have
``cuda.local.array``); the length must be a compile-time constant.
"""

from __future__ import annotations

from numba.core import cgutils, types
from numba.extending import intrinsic
from numba.np.arrayobj import make_array, populate_array

__all__ = ["local_vector"]


@intrinsic
def local_vector(typingctx, n):
    """``np.empty(n)`` (float64, C) allocated on the caller's stack; ``n`` must be a
    literal integer (a module constant)."""
    if not isinstance(n, types.IntegerLiteral) or n.literal_value < 1:
        return None
    size = int(n.literal_value)
    arrty = types.Array(types.float64, 1, "C")

    def codegen(context, builder, sig, args):
        data = cgutils.alloca_once(builder, context.get_data_type(types.float64), size=size)
        ary = make_array(arrty)(context, builder)
        intp = context.get_constant
        populate_array(ary, data=data, shape=[intp(types.intp, size)],
                       strides=[intp(types.intp, 8)], itemsize=intp(types.intp, 8),
                       meminfo=None)
        return ary._getvalue()

    return arrty(n), codegen
