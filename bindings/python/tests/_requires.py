"""Optional test dependencies: skipped when absent on a developer's machine,
a failure in CI (CI=true), where scripts/setup.sh installs them and a skip
would hide that nothing ran."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1")


def require(name: str) -> ModuleType:
    """Imports `name` for a test module, or skips that module (outside CI)."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        if in_ci():
            raise ImportError(f"{name} is not installed, and CI must run the tests that need it "
                              "(scripts/setup.sh installs it; TH_SETUP_TORCH=1)") from e
        pytest.skip(f"{name} is not installed (scripts/setup.sh installs it)", allow_module_level=True)
        raise  # unreachable: skip raises
