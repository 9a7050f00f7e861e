"""Transparent huge pages for a model's weights on Linux's CPU backend.

Decoding one token reads every weight once: SmolLM2-135M in float32 is ~540 MB, about 135,000
4-KiB pages, far beyond what the TLB maps, so the matrix products keep walking page tables. On
2-MiB pages the same weights are ~270 entries. Debian and Ubuntu run THP in `madvise` mode
and glibc's malloc (where MLX's CPU buffers come from) does not advise, so weights end up on
small pages. After a load, `advise_huge_pages` advises the 2-MiB-aligned parts of the weights'
address ranges (MADV_HUGEPAGE) and collapses them on a background thread (MADV_COLLAPSE, Linux
6.1+; on older kernels khugepaged collapses them, slowly). Measured on the 2-core test machine,
same weights and process layout otherwise: decode 5-8 % faster (docs/ARCHITECTURE.md, "CPU
speed").

The arrays stay where they are and their values are untouched (the kernel moves the pages
under them); at most the free bytes that share a 2-MiB page with weights become resident. Not
used on macOS (Metal's unified memory, 16-KiB pages) nor where the kernel refuses; the setting
`cpu_huge_pages` (MLX_SERVER_CPU_HUGE_PAGES) turns it off.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import sys
import threading
from collections.abc import Iterable
from typing import Any

logger = logging.getLogger("mlx_server")

HUGE_PAGE = 2 << 20
_MADV_HUGEPAGE = 14
_MADV_COLLAPSE = 25


def _libc() -> Any:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.madvise.restype = ctypes.c_int
    return libc


def buffer_span(array: Any) -> tuple[int, int] | None:
    """The address range of an evaluated MLX array's data; None if it is not one contiguous,
    writable buffer (a strided view)."""
    try:
        view = memoryview(array)
        start = ctypes.addressof(ctypes.c_char.from_buffer(view))
    except (TypeError, ValueError, BufferError):
        return None
    return start, start + view.nbytes


def huge_page_ranges(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The whole 2-MiB pages inside `spans`, spans less than a page apart counted as one (an
    allocator's neighbours; what lies between comes along)."""
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start - merged[-1][1] < HUGE_PAGE:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    ranges = []
    for start, end in merged:
        first = -(-start // HUGE_PAGE) * HUGE_PAGE
        last = end // HUGE_PAGE * HUGE_PAGE
        if last > first:
            ranges.append((first, last))
    return ranges


def advise_huge_pages(arrays: Iterable[Any]) -> threading.Thread | None:
    """Put the evaluated `arrays` (a CPU model's weights) on huge pages where the kernel allows.

    The advice is given now; the collapse (copying each 2-MiB run of small pages into a huge
    one, ~0.4 s per 500 MB here) runs on a background thread, which is returned, so a load does
    not wait for it: the weights stay usable meanwhile (the kernel swaps the pages under them, as
    khugepaged does). None off Linux or where the kernel has no THP."""
    if not sys.platform.startswith("linux"):
        return None
    libc = _libc()
    ranges = huge_page_ranges(span for span in map(buffer_span, arrays) if span is not None)
    for start, end in ranges:
        # ENOMEM: a hole in the range (two mappings less than a page apart); the advice still
        # applies to what is mapped. EINVAL: a kernel without THP, where nothing will take.
        if libc.madvise(start, end - start, _MADV_HUGEPAGE) != 0 and ctypes.get_errno() == errno.EINVAL:
            logger.debug("transparent huge pages are not available")
            return None

    def collapse() -> None:
        for start, end in ranges:
            libc.madvise(start, end - start, _MADV_COLLAPSE)  # where refused, khugepaged does it later

    thread = threading.Thread(target=collapse, name="huge-pages", daemon=True)
    thread.start()
    return thread
