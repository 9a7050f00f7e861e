"""Text models on a CPU with OpenBLAS: loaded as float32, counted at their float32 size, put on
huge pages, and left as stored when the setting says so."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import platform
import time
from collections.abc import Iterator
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import pytest

from mlx_server.config import reset_settings
from mlx_server.models.cpu_weights import load_text_model, loaded_bytes_estimate
from mlx_server.models.detection import read_config
from mlx_server.utils.cpu_blas import fast_cpu_blas
from mlx_server.utils.huge_pages import (
    _MADV_COLLAPSE,
    _MADV_HUGEPAGE,
    advise_huge_pages,
    buffer_span,
    huge_page_ranges,
)
from mlx_server.utils.memory import active_memory_bytes

pytestmark = pytest.mark.skipif(
    fast_cpu_blas() is None or mx.default_device() != mx.cpu,
    reason="needs MLX's CPU backend with OpenBLAS (Debian: libopenblas0-pthread)",
)


def _quantized_layers(model: nn.Module) -> int:
    return sum(isinstance(m, nn.QuantizedLinear | nn.QuantizedEmbedding) for _, m in model.named_modules())


def test_smollm2_loads_as_float32_and_the_estimate_is_what_the_load_takes(smollm_dir: Path) -> None:
    before = active_memory_bytes()
    model, _ = load_text_model(str(smollm_dir))
    taken = active_memory_bytes() - before
    assert _quantized_layers(model) == 0
    assert {v.dtype for _, v in nn.utils.tree_flatten(model.parameters())} == {mx.float32}
    files = sum(f.stat().st_size for f in smollm_dir.glob("*.safetensors"))
    estimate = loaded_bytes_estimate(smollm_dir, read_config(smollm_dir))
    assert estimate > 3 * files  # 4-bit weights (and 8-bit embeddings) grown to 32 bits
    assert taken == pytest.approx(estimate, rel=0.01)


def test_a_zero_limit_keeps_the_model_as_stored(smollm_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLX_SERVER_CPU_FLOAT_WEIGHTS_MAX_MB", "0")
    reset_settings()
    try:
        model, _ = load_text_model(str(smollm_dir))
        assert _quantized_layers(model) > 0
        files = sum(f.stat().st_size for f in smollm_dir.glob("*.safetensors"))
        assert loaded_bytes_estimate(smollm_dir, read_config(smollm_dir)) == files
    finally:
        monkeypatch.delenv("MLX_SERVER_CPU_FLOAT_WEIGHTS_MAX_MB")
        reset_settings()


def _mappings() -> Iterator[tuple[int, int, dict[str, str]]]:
    """This process's mappings from /proc/self/smaps: start, end and their fields."""
    current: tuple[int, int, dict[str, str]] | None = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head, _, rest = line.partition(" ")
        if "-" in head and ":" not in head:  # a mapping's first line: "start-end perms ..."
            if current is not None:
                yield current
            low, high = (int(x, 16) for x in head.split("-"))
            current = (low, high, {})
        elif current is not None:
            current[2][head.rstrip(":")] = rest.strip()
    if current is not None:
        yield current


def _huge_page_bytes(spans: list[tuple[int, int]]) -> int:
    """AnonHugePages of this process's mappings that hold any of `spans`."""
    return sum(
        int(fields.get("AnonHugePages", "0").split()[0]) * 1024
        for low, high, fields in _mappings()
        if any(start < high and end > low for start, end in spans)
    )


def _advised_mappings() -> list[tuple[int, int]]:
    """This process's mappings marked for huge pages (MADV_HUGEPAGE: "hg" in VmFlags)."""
    return [(low, high) for low, high, fields in _mappings() if "hg" in fields.get("VmFlags", "").split()]


def _kernel_huge_page_share(size: int) -> float:
    """The share of a fresh region of `size` bytes of our own that the kernel collapses onto huge
    pages now: below 1 when free memory is fragmented (late in the suite on a CI machine, after
    many loads, the kernel found 2-MiB pieces for only ~70 % of the weights)."""
    page = 2 << 20
    region = mmap.mmap(-1, size + page, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # not shmem
    region.write(b"x" * (size + page))  # every small page present
    view = ctypes.c_char.from_buffer(region)
    aligned = (ctypes.addressof(view) + page - 1) // page * page
    length = size // page * page
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.madvise(aligned, length, _MADV_HUGEPAGE)
    libc.madvise(aligned, length, _MADV_COLLAPSE)
    share = _huge_page_bytes([(aligned, aligned + length)]) / length
    del view
    region.close()
    return share


def _thp_collapse_available() -> bool:
    modes = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    release = tuple(int(x) for x in platform.release().split(".")[:2] if x.isdigit())
    return modes.exists() and "[never]" not in modes.read_text() and release >= (6, 1)


@pytest.mark.skipif(
    not _thp_collapse_available(), reason="needs THP (not 'never') and MADV_COLLAPSE (Linux 6.1+)"
)
def test_the_float32_weights_are_on_huge_pages(smollm_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as patch:
        patch.setenv("MLX_SERVER_CPU_HUGE_PAGES", "true")  # the default; `make test` turns it off
        reset_settings()
        model, _ = load_text_model(str(smollm_dir))
    reset_settings()
    spans = [span for _, a in nn.utils.tree_flatten(model.parameters()) if (span := buffer_span(a))]
    weights = sum(end - start for start, end in spans)
    # The load advised every whole 2-MiB page of the weights (whatever the kernel can give now).
    advised = _advised_mappings()
    pages = [page for start, end in huge_page_ranges(spans) for page in range(start, end, 2 << 20)]
    assert pages and all(any(low <= page < high for low, high in advised) for page in pages)
    # All but the edges of each run of weights (a 2-MiB page must lie wholly inside it), once the
    # load's background collapse is through (~0.5 s here).
    deadline = time.monotonic() + 30
    while _huge_page_bytes(spans) < 0.8 * weights and time.monotonic() < deadline:
        time.sleep(0.2)
    if _huge_page_bytes(spans) < 0.8 * weights:
        # The load's one collapse found too few free 2-MiB pages (late in a CI run memory is
        # fragmented: 31 % of the weights once, while the compaction that collapse triggered let
        # a fresh region take 80 % a moment later). Collapse again, as khugepaged would later,
        # and judge the ranges we advise against what the kernel gives a region of our own now.
        thread = advise_huge_pages(a for _, a in nn.utils.tree_flatten(model.parameters()))
        assert thread is not None
        thread.join(timeout=30)
        ours = _huge_page_bytes(spans) / weights
        if ours < 0.8 and (kernel := _kernel_huge_page_share(weights)) < 0.8:
            pytest.skip(f"the kernel has too few free 2-MiB pages now: {kernel:.0%} of a region of our own")
    assert _huge_page_bytes(spans) >= 0.8 * weights


def test_huge_page_ranges_keep_whole_pages_inside_runs_of_buffers() -> None:
    mib = 1 << 20
    spans = [(1 * mib + 24, 3 * mib), (3 * mib + 64, 7 * mib + 8), (20 * mib, 21 * mib), (40 * mib, 44 * mib)]
    # The first two are one run (64 bytes apart): pages 2-4 MiB and 4-6 MiB; 20-21 MiB holds no
    # whole page; 40-44 MiB is two.
    assert huge_page_ranges(spans) == [(2 * mib, 6 * mib), (40 * mib, 44 * mib)]
