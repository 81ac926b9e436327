"""Haar-wavelet adaptive first-order finite volumes (HWFV1) for shallow water."""
