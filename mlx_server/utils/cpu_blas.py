"""A fast BLAS for MLX's CPU backend on Linux.

The Linux `mlx[cpu]` wheel links the reference (netlib) BLAS it bundles: its `cblas_sgemm` runs
float32 matrix products at ~6 GFLOP/s on this project's 2-core test machine, where OpenBLAS
does ~200. MLX resolves `cblas_sgemm` when `mlx.core` is first imported, and a library already
loaded with RTLD_GLOBAL comes first in that lookup, so loading OpenBLAS globally before the
first `import mlx.core` makes every float32 product of MLX's CPU backend use it (measured on
SmolLM2-135M: prefill 10 -> 276 tokens/s once the weights are float32, see loaders.py).

OpenBLAS picks its kernels for the CPU at load time, and where it does not know the CPU (a
virtual machine reporting a newer Xeon than the library knows) it falls back to its SSE3
"Prescott" kernels: on this project's AVX-512 test VM that ran float32 products at ~26 GFLOP/s
instead of ~180. Unless `OPENBLAS_CORETYPE` is set already, the kernels are chosen here from the
instruction sets the kernel reports in /proc/cpuinfo (AVX-512 -> SkylakeX, AVX2 with FMA ->
Haswell: the kernel families OpenBLAS itself uses for every CPU with those instructions), and the
variable is set before the library loads, so processes started from this one inherit the choice.

macOS is untouched: MLX runs on Metal there and its CPU backend uses Accelerate. Set
`MLX_SERVER_CPU_BLAS=off` to keep the bundled BLAS, or to a library path to choose one.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import platform
import sys
from pathlib import Path

logger = logging.getLogger("mlx_server")

_loaded: str | None = None
_core: str | None = None

# What each OpenBLAS kernel family needs from the CPU, best first.
_CORES = (
    ("SkylakeX", frozenset({"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"})),
    ("Haswell", frozenset({"avx2", "fma"})),
)


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The instruction-set flags of the first CPU in a /proc/cpuinfo text."""
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def openblas_core_for(flags: frozenset[str]) -> str | None:
    """The OpenBLAS kernel family (an OPENBLAS_CORETYPE value) these CPU flags support, or None
    to leave the choice to OpenBLAS."""
    return next((core for core, needs in _CORES if needs <= flags), None)


def _choose_openblas_core() -> None:
    if "OPENBLAS_CORETYPE" in os.environ or platform.machine() != "x86_64":
        return
    try:
        core = openblas_core_for(cpu_flags(Path("/proc/cpuinfo").read_text()))
    except OSError:
        return
    if core:
        os.environ["OPENBLAS_CORETYPE"] = core  # read by OpenBLAS when it loads


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
    _choose_openblas_core()
    try:
        library = ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        logger.warning("MLX_SERVER_CPU_BLAS: cannot load %s (%s); using MLX's bundled BLAS", name, exc)
        return None
    _loaded = name
    global _core
    corename = getattr(library, "openblas_get_corename", None)
    if corename is not None:
        corename.restype = ctypes.c_char_p
        _core = corename().decode()
    return _loaded


def fast_cpu_blas() -> str | None:
    """The BLAS library loaded for MLX's CPU backend, or None when it uses its bundled one."""
    return _loaded


def blas_kernels() -> str | None:
    """The kernel family the loaded OpenBLAS runs ("SkylakeX", "Haswell", "Zen", ...), or None."""
    return _core
