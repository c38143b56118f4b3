"""The package list in pyproject.toml names every package of the binding,
so that an installed copy has all of them (setuptools installs only the
packages listed)."""

from pathlib import Path

import pytest


def test_every_package_is_listed_in_pyproject() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    root = Path(__file__).resolve().parents[1]
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(root).parts) for p in (root / "tensorhub").rglob("__init__.py")}
    assert "tensorhub.torch" in found
    assert found == listed, f"packages on disk {sorted(found)}, listed {sorted(listed)}"
