"""OpenBLAS's kernels: chosen from the CPU's instruction sets unless the user chose, so a CPU the
library does not know (a VM's newer Xeon) does not fall back to its SSE3 kernels."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlx_server.utils.cpu_blas import cpu_flags, fast_cpu_blas, openblas_core_for

# Flag lines as the Linux kernel writes them (shortened) for three CPUs.
SAPPHIRE_RAPIDS = (
    "flags\t\t: fpu sse sse2 fma avx avx2 avx512f avx512dq avx512cd avx512bw avx512vl avx512_fp16"
)
EPYC_ZEN2 = "flags\t\t: fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 bmi2 sha_ni"
OLD_ATOM = "flags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2"


def _cpuinfo(flags_line: str) -> str:
    return f"processor\t: 0\nvendor_id\t: GenuineIntel\n{flags_line}\nbogomips\t: 4800.00\n\nprocessor\t: 1\n"


@pytest.mark.parametrize(
    ("flags_line", "core"),
    [(SAPPHIRE_RAPIDS, "SkylakeX"), (EPYC_ZEN2, "Haswell"), (OLD_ATOM, None), ("", None)],
)
def test_the_kernels_follow_the_instruction_sets(flags_line: str, core: str | None) -> None:
    assert openblas_core_for(cpu_flags(_cpuinfo(flags_line))) == core


def _kernels_in_a_new_process(**env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"} | env
    code = "import mlx_server; from mlx_server.utils.cpu_blas import blas_kernels; print(blas_kernels())"
    command = [sys.executable, "-c", code]
    done = subprocess.run(command, env=environ, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


needs_openblas = pytest.mark.skipif(fast_cpu_blas() is None, reason="needs the system's OpenBLAS (Linux)")


@needs_openblas
def test_the_server_runs_the_kernels_its_cpu_supports() -> None:
    expected = openblas_core_for(cpu_flags(Path("/proc/cpuinfo").read_text()))
    if expected is None:
        pytest.skip("this CPU has neither AVX2 nor AVX-512: OpenBLAS chooses")
    assert _kernels_in_a_new_process() == expected


@needs_openblas
def test_a_kernel_choice_of_the_user_is_kept() -> None:
    assert _kernels_in_a_new_process(OPENBLAS_CORETYPE="Prescott") == "Prescott"
