"""Two-layer shallow water on unstructured triangle meshes: the seed's IR-Roe scheme
(de la Asunción, Mantas, Castro, Fernández-Nieto 2012) and IFCP, first order, on the
CPU (Numba) and the GPU (Numba-CUDA) from one source.  See ``docs/tworoe.md``.

* :mod:`.mesh`: :class:`TriMesh` (connectivity, geometry, checks, locality ordering);
* :mod:`.mesh_io`: gmsh ``.msh`` (meshio) and Triangle ``.node``/``.ele`` readers;
* :mod:`.generate`: the seed's disc-in-square meshes (``triangle``), strips;
* :mod:`.physics`: the projected fluxes, pointwise;
* :mod:`.kernels`, :mod:`.gpu`: one step on the CPU and the GPU;
* :mod:`.solver`: :class:`TwoLayerSolver`;
* :mod:`.distributed`: the run across MPI ranks, CPU or GPU (bitwise equal to one rank);
* :mod:`.riemann`: the fluxes as first-order Riemann solvers of the quadtree patches;
* :mod:`.output`: ``.vtu`` frames and a ``.pvd``.
"""

from .generate import SEED_CELLS, disc_in_square, strip
from .mesh import MeshError, TriMesh
from .mesh_io import read_mesh, read_triangle_files, write_triangle_files
from .solver import DepthError, TwoLayerSolver

__all__ = ["SEED_CELLS", "DepthError", "MeshError", "TriMesh", "TwoLayerSolver",
           "disc_in_square", "read_mesh", "read_triangle_files", "strip",
           "write_triangle_files"]
