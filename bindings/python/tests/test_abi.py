"""The ctypes mirrors must match the C header: sizes and every field offset,
checked against what a C compiler says, and every function declared."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import pytest

from _header import HEADER, run_c

from tensorhub import _lib

STRUCTS = {
    "th_tensor": _lib.Tensor,
    "th_range": _lib.Range,
    "th_server_config": _lib.ServerConfig,
    "th_client_config": _lib.ClientConfig,
    "th_publish_config": _lib.PublishConfig,
    "th_fetch_config": _lib.FetchConfig,
    "th_sync_stats": _lib.SyncStats,
}


def c_layout(tmp_path: Path) -> dict[str, int]:
    """sizeof and offsetof of every mirrored struct and field, from cc."""
    lines = []
    for c_name, mirror in STRUCTS.items():
        lines.append(f'printf("{c_name} %zu\\n", sizeof({c_name}));')
        for field, _ in mirror._fields_:
            lines.append(f'printf("{c_name}.{field} %zu\\n", offsetof({c_name}, {field}));')
    out = run_c(tmp_path, "layout", lines)
    return {key: int(value) for key, value in (line.split() for line in out.splitlines())}


@pytest.mark.skipif(not HEADER.exists(), reason="the C header is not next to this binding")
def test_struct_layouts_match_the_header(tmp_path: Path) -> None:
    expected = c_layout(tmp_path)
    for c_name, mirror in STRUCTS.items():
        assert ctypes.sizeof(mirror) == expected[c_name], c_name
        for field, _ in mirror._fields_:
            assert getattr(mirror, field).offset == expected[f"{c_name}.{field}"], f"{c_name}.{field}"


@pytest.mark.skipif(not HEADER.exists(), reason="the C header is not next to this binding")
def test_every_function_and_field_of_the_header_is_mirrored() -> None:
    text = HEADER.read_text()
    functions = set(re.findall(r"TH_API\s+[\w\s\*]+?\b(th_\w+)\s*\(", text))
    assert functions, "no TH_API function found in the header"
    for name in functions:
        assert getattr(_lib.lib, name).argtypes is not None, f"{name} has no argtypes"
    # Fields appended to a config struct in the header must be appended here too.
    for c_name, mirror in STRUCTS.items():
        body = re.search(r"typedef struct " + c_name + r" \{(.*?)\} " + c_name + ";", text, re.S)
        assert body, c_name
        declarations = re.sub(r"/\*.*?\*/", "", body.group(1), flags=re.S)
        # A function pointer "void (*name)(...);" declares the field name.
        declarations = re.sub(r"\(\s*\*\s*(\w+)\s*\)\s*\([^)]*\)\s*;", r"\1;", declarations)
        fields = re.findall(r"(\w+)(?:\[\w+\])?;", declarations)
        assert fields == [f for f, _ in mirror._fields_], c_name


def test_config_init_sets_struct_size() -> None:
    for mirror, init in [(_lib.ServerConfig, _lib.lib.th_server_config_init),
                         (_lib.ClientConfig, _lib.lib.th_client_config_init),
                         (_lib.PublishConfig, _lib.lib.th_publish_config_init),
                         (_lib.FetchConfig, _lib.lib.th_fetch_config_init)]:
        cfg = _lib.new_config(mirror, init)
        assert cfg.struct_size == ctypes.sizeof(mirror)
    fetch = _lib.new_config(_lib.FetchConfig, _lib.lib.th_fetch_config_init)
    assert fetch.version == _lib.TH_LATEST
