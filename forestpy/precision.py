"""Working precision of pointwise sources: one Python source, FP64 or FP32 arithmetic.

The pointwise functions of forestpy (Riemann solvers, limiters) are written once with
plain float literals (``0.5 * (hl + hr)``).  Numba types a float literal as float64, so
a function given float32 arguments would still compute in float64 wherever a literal
appears.  :func:`in_precision` compiles a copy of such a function, and recursively of
every ``numba.njit`` function it calls, in which each float literal, each module-level
float constant it reads (``math.inf``, ``math.nan``, ``math.pi``, a module's ``EPS``)
and each ``float(x)`` call is of the working precision: given float32 arrays and
scalars, the compiled code then computes in float32 throughout.

Integer literals are left as they are (they index arrays); an integer literal that
meets a float32 value in arithmetic promotes it to float64 under Numba's rules, so
sources that must run in FP32 write float literals (``2.0 * h``, not ``2 * h``).
:func:`float64_variables` lists what still computes in float64 after compilation: the
tests check that the project's solvers have none.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types

import numpy as np
from numba.core.registry import CPUDispatcher

__all__ = ["PRECISIONS", "check_precision", "float64_variables", "in_precision",
           "with_literals"]

#: The arithmetic modes of the wave-propagation kernels: ``float64``; ``float32`` (FP32
#: storage and arithmetic); ``mixed`` (FP64 storage, normal solve and update; limiter,
#: second-order corrections and transverse splittings in FP32).
PRECISIONS = ("float64", "float32", "mixed")

_COMPILED: dict = {}


def check_precision(precision) -> str:
    """``precision`` as one of :data:`PRECISIONS` (one clear error otherwise)."""
    p = "float64" if precision is None else str(precision)
    if p not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; valid: {list(PRECISIONS)}")
    return p


def _py(func):
    return func.py_func if isinstance(func, CPUDispatcher) else func


class _Literals(ast.NodeTransformer):
    """Float literals, float globals and ``float(...)`` of one function -> names bound to
    the working precision's scalars (``consts``) and its type (``_fp_real``)."""

    def __init__(self, fdef, env, real):
        self.env = env
        self.real = real
        self.consts: dict = {}
        self.local = {a.arg for a in ast.walk(fdef.args) if isinstance(a, ast.arg)}
        for node in ast.walk(fdef):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                self.local.add(node.id)

    def _const(self, value, node):
        name = f"_fp_{len(self.consts)}"
        self.consts[name] = self.real(value)
        return ast.copy_location(ast.Name(id=name, ctx=ast.Load()), node)

    def visit_Constant(self, node):
        if type(node.value) is float:
            return self._const(node.value, node)
        return node

    def visit_Name(self, node):
        if (isinstance(node.ctx, ast.Load) and node.id not in self.local
                and type(self.env.get(node.id)) is float):
            return self._const(self.env[node.id], node)
        return node

    def visit_Attribute(self, node):
        if isinstance(node.value, ast.Name) and node.value.id not in self.local:
            mod = self.env.get(node.value.id)
            if isinstance(mod, types.ModuleType) and type(getattr(mod, node.attr, None)) is float:
                return self._const(getattr(mod, node.attr), node)
        return self.generic_visit(node)

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Name) and f.id == "float" and "float" not in self.local:
            node.func = ast.copy_location(ast.Name(id="_fp_real", ctx=ast.Load()), node.func)
        return node


def with_literals(func, dtype):
    """A copy of the plain Python function ``func`` (its globals, defaults and closure
    values kept) whose float literals, float globals and ``float()`` calls are of
    ``dtype``; ``func`` itself for float64."""
    dtype = np.dtype(dtype)
    if dtype == np.float64:
        return func
    if dtype != np.float32:
        raise ValueError(f"working precision float64 or float32, not {dtype}")
    import numba

    src = textwrap.dedent(inspect.getsource(func))
    tree = ast.parse(src)
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef):
        raise ValueError(f"{func.__qualname__}: cannot rewrite the literals of a "
                         f"{type(fdef).__name__}")
    fdef.decorator_list = []
    env = dict(func.__globals__)
    if func.__closure__:
        env.update(zip(func.__code__.co_freevars,
                       (c.cell_contents for c in func.__closure__)))
    rewrite = _Literals(fdef, env, dtype.type)
    tree = ast.fix_missing_locations(rewrite.visit(tree))
    ast.increment_lineno(tree, func.__code__.co_firstlineno - 1)
    env.update(rewrite.consts)
    env["_fp_real"] = numba.from_dtype(dtype)
    exec(compile(tree, inspect.getsourcefile(func) or "<forestpy>", "exec"), env)
    new = env[fdef.name]
    new.__defaults__ = func.__defaults__
    new.__kwdefaults__ = func.__kwdefaults__
    new.__qualname__ = func.__qualname__
    new.__module__ = func.__module__
    return new


def in_precision(func, dtype, target: str = "cpu"):
    """``func`` (plain or ``numba.njit``) compiled for ``target`` (``"cpu"``: Numba,
    ``"cuda"``: a Numba-CUDA device function) with its arithmetic in ``dtype`` (see the
    module docstring); its ``numba.njit`` callees are compiled the same way.  Cached per
    (function, precision, target)."""
    from .cuda_device import cuda_device, recompile_tree

    dtype = np.dtype(dtype)
    if dtype == np.float64:
        return cuda_device(func) if target == "cuda" else func
    if target == "cpu":
        import numba

        def build(py):
            return numba.njit(with_literals(py, dtype))
    elif target == "cuda":
        from numba import cuda

        def build(py):
            return cuda.jit(device=True)(with_literals(py, dtype))
    else:
        raise ValueError(f"target must be 'cpu' or 'cuda', not {target!r}")
    cache = _COMPILED.setdefault((dtype.char, target), {})
    return recompile_tree(func, build, cache)


def float64_variables(dispatcher) -> list[str]:
    """Names of the variables that the compiled ``numba.njit`` ``dispatcher`` types as
    float64, in every signature it was compiled for and in every ``numba.njit`` function
    it calls (the check that an FP32 build computes in FP32)."""
    from numba import types as nt

    found: list[str] = []
    seen: set = set()

    def visit(disp, where):
        if id(disp) in seen:
            return
        seen.add(id(disp))
        for cres in disp.overloads.values():
            for var, ty in cres.fndesc.typemap.items():
                if ty == nt.float64:
                    found.append(f"{where}:{var}")
        for name in _names(_py(disp).__code__):
            g = _py(disp).__globals__.get(name)
            if isinstance(g, CPUDispatcher):
                visit(g, g.py_func.__qualname__)

    visit(dispatcher, _py(dispatcher).__qualname__)
    return found


def _names(code):
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _names(c)
    return names

