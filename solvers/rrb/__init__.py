"""Repeated Red-Black preconditioned conjugate gradients for 5-point SPD operators."""
