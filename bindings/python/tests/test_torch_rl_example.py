"""examples/python/torch_rl.py end to end: a trainer process steps a real
transformers model and publishes every version in place; rollout processes
fetch into their own model instances and get the trainer's logits bit for bit,
while one rollout is killed in the middle of a fetch and one joins late."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _requires import require

torch = require("torch")
require("transformers")

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "python" / "torch_rl.py"


@pytest.mark.skipif(not EXAMPLE.exists(), reason="examples/ is not next to this binding")
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device"))])
def test_trainer_and_rollouts_agree_bit_for_bit_through_a_kill_and_a_late_join(device: str) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "bindings" / "python"), env.get("PYTHONPATH", "")])
    versions = 5
    proc = subprocess.run([sys.executable, str(EXAMPLE), "--versions", str(versions), "--rollouts", "3",
                           "--kill", "1", "--kill-at", "2", "--late", "2", "--late-at", "3", "--timeout", "30",
                           "--device", device],
                          env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["mismatches"] == [], out
    assert summary["trainer"] == list(range(1, versions + 1))
    # rollout-0 checked every version against the trainer, bit for bit.
    assert summary["seen"]["rollout-0"] == list(range(1, versions + 1)), out
    assert out.count("logits and tokens equal the trainer's, bit for bit") == sum(map(len, summary["seen"].values()))
    # rollout-1 was killed with part of version 2 in its parameters; nobody else noticed.
    killed = summary["killed"]
    assert killed["rollout"] == "rollout-1" and killed["version"] == 2 and 0 < killed["done"] < killed["total"], out
    assert summary["seen"]["rollout-1"] == [1]
    assert summary["exit_codes"] == {"trainer": 0, "rollout-0": 0, "rollout-1": -9, "rollout-2": 0}, out
    # rollout-2 started after version 3 and got the newest version, then every later one.
    late = summary["late"]
    assert late["rollout"] == "rollout-2" and late["first_version"] == late["latest_when_fetched"] == 3, out
    assert summary["seen"]["rollout-2"] == list(range(3, versions + 1)), out
