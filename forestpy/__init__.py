"""forestpy: adaptive quadtree-forest patches for hyperbolic PDEs, batched on CPU and GPU."""

__version__ = "0.1.0"
