"""The Python snippets of the READMEs run as they are written."""
import pathlib
import re

import pytest

from _requires import in_ci

ROOT = pathlib.Path(__file__).resolve().parents[3]
READMES = [ROOT / "README.md", ROOT / "bindings" / "python" / "README.md"]


def snippets():
    for readme in READMES:
        for i, block in enumerate(re.findall(r"```python\n(.*?)```", readme.read_text(), re.S)):
            yield pytest.param(block, id=f"{readme.relative_to(ROOT)}#{i}")


@pytest.mark.parametrize("code", list(snippets()))
def test_snippet_runs(code: str) -> None:
    namespace: dict = {}
    if "import torch" in code and not in_ci():
        pytest.importorskip("torch")  # scripts/setup.sh installs it; in CI it must be there
    exec(compile(code, "<readme>", "exec"), namespace)  # noqa: S102 - our own documentation
    for name in ("rollout", "trainer", "server"):
        obj = namespace.get(name)
        if obj is not None and hasattr(obj, "close"):
            obj.close()
