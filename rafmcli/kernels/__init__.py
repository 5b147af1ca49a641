"""numba kernels, free of I/O: the Theorem 3 forward pass and per-solver updates."""
