"""The library's log: to a Python handler or Python's logging instead of
stderr, at a level set at run time."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import assert_same, connect, empty_like, weights

import tensorhub


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    level = tensorhub.log_level()
    yield
    tensorhub.set_log_handler(None)
    tensorhub.set_log_level(level)


def register(name: str) -> None:
    """A server and a worker registering with it: the server logs that at info."""
    with tensorhub.Server() as server, connect(server, name):
        pass


def test_lines_go_to_the_handler_at_the_level_in_force_and_not_to_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    got: list[tuple[str, str]] = []
    lock = threading.Lock()

    def handler(level: str, message: str) -> None:
        with lock:
            got.append((level, message))

    tensorhub.set_log_level("info")
    assert tensorhub.log_level() == "info"
    tensorhub.set_log_handler(handler)
    register("heard")
    assert ("info", next(m for _, m in got if "'heard' registered" in m)) in got
    assert capfd.readouterr().err == ""

    tensorhub.set_log_level("warn")
    register("unheard")
    assert not any("'unheard'" in m for _, m in got)

    tensorhub.set_log_handler(None)
    tensorhub.set_log_level("info")
    register("on-stderr")
    err = capfd.readouterr().err
    assert "INFO worker" in err and "'on-stderr' registered" in err
    assert not any("'on-stderr'" in m for _, m in got)


def test_to_logging_sends_lines_to_the_tensorhub_logger(caplog: pytest.LogCaptureFixture) -> None:
    tensorhub.set_log_level("info")
    tensorhub.set_log_handler(tensorhub.to_logging)
    with caplog.at_level(logging.INFO, logger="tensorhub"):
        register("logged")
    records = [r for r in caplog.records if "'logged' registered" in r.getMessage()]
    assert records and records[0].name == "tensorhub" and records[0].levelno == logging.INFO


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # what it raised, printed
def test_a_handler_that_raises_changes_nothing_for_the_library(server: tensorhub.Server) -> None:
    def broken(level: str, message: str) -> None:
        raise RuntimeError("a handler's bug")

    tensorhub.set_log_level("debug")
    tensorhub.set_log_handler(broken)
    src = weights(3)
    with connect(server, "trainer") as trainer, connect(server, "rollout") as rollout:
        trainer.publish("m", 1, src)
        dst = empty_like(src)
        assert rollout.fetch("m", 1, into=dst) == 1
    assert_same(src, dst)


def test_bad_levels_and_handlers_are_refused() -> None:
    with pytest.raises(ValueError, match="error, warn, info, debug"):
        tensorhub.set_log_level("verbose")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        tensorhub.set_log_handler("stderr")  # type: ignore[arg-type]


def test_an_interpreter_leaving_with_a_handler_set_exits_cleanly(tmp_path: Path) -> None:
    # Library threads still log while the interpreter goes away: the handler
    # is removed first, and what they say after that goes to stderr.
    script = tmp_path / "leave.py"
    script.write_text(
        "import sys, tensorhub\n"
        "tensorhub.set_log_level('debug')\n"
        "tensorhub.set_log_handler(lambda level, message: print(level, message, flush=True))\n"
        "server = tensorhub.Server()\n"
        "client = tensorhub.Client(server.url, name='leaving')\n"
        "print('set up', flush=True)\n"
        "sys.exit(0)  # neither closed: they go with the interpreter\n"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(tensorhub.__file__).resolve().parent.parent))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "set up" in proc.stdout and "'leaving' registered" in proc.stdout
