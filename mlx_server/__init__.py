"""MLX Server: OpenAI- and Anthropic-compatible inference on Apple's MLX stack."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mlx-manager")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0"

# Before anything imports mlx.core: MLX's Linux CPU build then multiplies through OpenBLAS.
from mlx_server.utils.cpu_blas import load_fast_cpu_blas

load_fast_cpu_blas()
