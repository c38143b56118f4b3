"""Build hook: bundles libtensorhub.so into the package (tensorhub/lib/).

Metadata lives in pyproject.toml; this file only adds what setuptools cannot
declare: the version (from the C header) and the copy of the C library.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
HEADER = ROOT / "include" / "tensorhub" / "tensorhub.h"


def version() -> str:
    if HEADER.exists():
        text = HEADER.read_text()
        parts = [re.search(rf"#define TH_VERSION_{p}\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
        if all(parts):
            return ".".join(m.group(1) for m in parts)  # type: ignore[union-attr]
    pkg_info = HERE / "PKG-INFO"  # building from an sdist
    if pkg_info.exists():
        found = re.search(r"^Version:\s*(\S+)", pkg_info.read_text(), re.M)
        if found:
            return found.group(1)
    raise SystemExit(f"tensorhub: cannot find the version in {HEADER}")


def library() -> Path:
    # An explicit TENSORHUB_LIB is the only candidate: bundling another
    # library than the one asked for would go unnoticed.
    env = os.environ.get("TENSORHUB_LIB")
    candidates = [Path(env)] if env else [ROOT / "build" / "libtensorhub.so"]
    for candidate in candidates:
        if candidate.is_dir():
            candidate = candidate / "libtensorhub.so"
        if candidate.exists():
            return candidate.resolve()  # the real file behind the .so -> .so.0 symlinks
    raise SystemExit(
        "tensorhub: libtensorhub.so not found (tried " + ", ".join(str(c) for c in candidates) + "). "
        "Build the C library first (scripts/build.sh from the repository root), or set TENSORHUB_LIB "
        "to the library to bundle.")


class BuildPyWithLibrary(build_py):
    """Copies the C library into the built package; the source tree is left
    alone, so a stale copy can never shadow a freshly built ../../build."""

    def run(self) -> None:
        super().run()
        source = library()
        target = Path(self.build_lib) / "tensorhub" / "lib" / "libtensorhub.so"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        os.chmod(target, 0o755)
        print(f"tensorhub: bundled {source} as {target}")


class BinaryDistribution(Distribution):
    """The wheel carries a native library: tag it for this platform."""

    def has_ext_modules(self) -> bool:
        return True


setup(version=version(), cmdclass={"build_py": BuildPyWithLibrary}, distclass=BinaryDistribution)
