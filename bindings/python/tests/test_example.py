"""examples/python/rl_loop.py runs to completion with tiny sizes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "python" / "rl_loop.py"


@pytest.mark.skipif(not EXAMPLE.exists(), reason="examples/ is not next to this binding")
def test_rl_loop_example() -> None:
    env = dict(os.environ)
    # The source tree under test, ahead of any installed copy.
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "bindings" / "python"), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, str(EXAMPLE), "--steps", "3", "--rollouts", "2", "--mb", "0.5",
                           "--train-time", "0.25", "--progress"], env=env, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rollout in (0, 1):
        assert f"[rollout-{rollout}] version 3:" in proc.stdout
    assert proc.stdout.count("verified") >= 2
    assert "published version 3" in proc.stdout
    assert "GB/s from 1 source(s)" in proc.stdout
    # rollout-0's progress bar ends full.
    assert "[rollout-0] fetching [" + "#" * 30 + "] 100%" in proc.stderr
