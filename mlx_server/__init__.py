"""MLX Server: OpenAI- and Anthropic-compatible inference on Apple's MLX stack."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mlx-manager")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0"
