"""A fast BLAS for MLX's CPU backend on Linux.

The Linux `mlx[cpu]` wheel links the reference (netlib) BLAS it bundles: its `cblas_sgemm` runs
float32 matrix products at ~6 GFLOP/s on this project's 2-core test machine, where OpenBLAS
does ~200. MLX resolves `cblas_sgemm` when `mlx.core` is first imported, and a library already
loaded with RTLD_GLOBAL comes first in that lookup, so loading OpenBLAS globally before the
first `import mlx.core` makes every float32 product of MLX's CPU backend use it (measured on
SmolLM2-135M: prefill 10 -> 276 tokens/s once the weights are float32, see loaders.py).

macOS is untouched: MLX runs on Metal there and its CPU backend uses Accelerate. Set
`MLX_SERVER_CPU_BLAS=off` to keep the bundled BLAS, or to a library path to choose one.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys

logger = logging.getLogger("mlx_server")

_loaded: str | None = None


def load_fast_cpu_blas() -> str | None:
    """Load OpenBLAS globally before mlx.core is imported; the library loaded, or None."""
    global _loaded
    if _loaded is not None or not sys.platform.startswith("linux"):
        return _loaded
    choice = os.environ.get("MLX_SERVER_CPU_BLAS", "auto").strip()
    if choice.lower() == "off" or "mlx.core" in sys.modules:
        return None  # too late once mlx.core has resolved its symbols
    name = choice if choice.lower() != "auto" else ctypes.util.find_library("openblas")
    if not name:
        return None
    try:
        ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        logger.warning("MLX_SERVER_CPU_BLAS: cannot load %s (%s); using MLX's bundled BLAS", name, exc)
        return None
    _loaded = name
    return _loaded


def fast_cpu_blas() -> str | None:
    """The BLAS library loaded for MLX's CPU backend, or None when it uses its bundled one."""
    return _loaded
