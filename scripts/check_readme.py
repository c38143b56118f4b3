#!/usr/bin/env python3
"""Checks that every code snippet of README.md is exercised by a test.

A C block's lines must all appear in the C examples (which a test builds and
runs); Python, Rust and Go blocks must appear in their binding's README, where
a test runs (Python), doc-tests (Rust) or compares against a tested Example
(Go) the full snippet."""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCES = {
    "c": [ROOT / "examples/c/publisher.c", ROOT / "examples/c/reader.c"],
    "python": [ROOT / "bindings/python/README.md"],
    "rust": [ROOT / "bindings/rust/README.md"],
    "go": [ROOT / "bindings/go/README.md"],
}


def main() -> int:
    readme = (ROOT / "README.md").read_text()
    passed = failed = 0
    for lang, block in re.findall(r"```(\w+)\n(.*?)```", readme, re.S):
        if lang not in SOURCES:
            continue
        text = "\n".join(p.read_text() for p in SOURCES[lang])
        lines = {l.strip() for l in text.splitlines()}
        missing = [l for l in block.splitlines() if l.strip() and l.strip() not in lines]
        for line in missing:
            print(f"README.md {lang} snippet: not in {[str(p.relative_to(ROOT)) for p in SOURCES[lang]]}: {line!r}")
        failed += bool(missing)
        passed += not missing
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or passed < len(SOURCES) else 0


if __name__ == "__main__":
    sys.exit(main())
