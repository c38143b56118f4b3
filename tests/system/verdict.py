"""How a system test ends: its report, its verdict and its exit code, with
the last lines of its processes' logs when it failed."""

import json
import os
import shutil
import tempfile

SKIP = 77  # ctest's SKIP_RETURN_CODE


def run_in_tmp(prefix, body, show_log=lambda name: True):
    """Runs body(tmp) in a fresh folder and returns the exit code. body
    returns None (skipped) or (problems, report); the folder is removed
    unless TH_KEEP_TMP is set."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    try:
        result = body(tmp)
        if result is None:
            return SKIP
        problems, report = result
        print(json.dumps(report, indent=1))
        if problems:
            print("FAILED:\n  " + "\n  ".join(problems))
            for f in sorted(os.listdir(tmp)):
                if f.endswith(".log") and show_log(f):
                    print(f"--- {f} (last lines)\n" + "".join(open(os.path.join(tmp, f)).readlines()[-15:]))
            return 1
        print("passed")
        return 0
    finally:
        if os.environ.get("TH_KEEP_TMP"):
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
