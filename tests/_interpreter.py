"""Running kernel checks in Triton's interpreter, in a fresh process: the interpreter is
switched on by an environment variable read when Triton is imported, so it cannot be turned
on inside a test process that has imported Triton already."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any


def run_interpreted(script: str, *args: str, timeout: float = 600) -> Any:
    """`script` run with TRITON_INTERPRET=1 (and `args`); the JSON on its last output line."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
