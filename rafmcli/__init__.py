"""rafm: rank-aware factorization machines (RaFM), FM and DiFacto.

Importing the package is cheap: numba kernels are imported (and, on first
use, compiled) only inside the commands that need them.
"""

__version__ = "0.1.0"
