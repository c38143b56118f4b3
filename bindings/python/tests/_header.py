"""The C header next to this binding, and a way to ask a C compiler what it
says: the tests that hold the ctypes mirrors to the header use both."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

HEADER_DIR = Path(__file__).resolve().parents[3] / "include"
HEADER = HEADER_DIR / "tensorhub" / "tensorhub.h"


def run_c(tmp_path: Path, name: str, statements: list[str]) -> str:
    """Compiles and runs main() { statements } with the header (and stdio,
    stddef) included; returns what it printed. Skips without a compiler."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler to read the header with")
    source = tmp_path / f"{name}.c"
    source.write_text("#include <stddef.h>\n#include <stdio.h>\n#include \"tensorhub/tensorhub.h\"\n"
                      "int main(void) {\n" + "\n".join(statements) + "\nreturn 0;\n}\n")
    exe = tmp_path / name
    subprocess.run([cc, "-std=c99", "-I", str(HEADER_DIR), str(source), "-o", str(exe)], check=True)
    return subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
