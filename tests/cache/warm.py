"""Running a script in fresh processes that share one cache directory (the warm-start tests' harness).

The script's last line of output is JSON (`report(...)` below, prepended to every script):
the values the test checks, what the process compiled (`progress.stage_counts`) and the
`cache` log lines.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2] / "src"

PRELUDE = '''
import json, sys, torch
import tensorjit
from tensorjit import logs, progress

def report(**values):
    values["compiled"] = dict(progress.stage_counts)
    values["cache"] = logs.recent("cache")
    print(json.dumps(values))

def same(a, b):
    return bool(torch.allclose(a, b, atol=1e-5, rtol=1e-5))
'''


def write_script(directory: Path, body: str, name: str = "script.py") -> Path:
    path = directory / name
    path.write_text(PRELUDE + textwrap.dedent(body))
    return path


def run(script: Path, cache: Path, *arguments: str, env: dict | None = None) -> dict:
    # the checkout's source first, then whatever the suite itself runs with (installed-by-path deps)
    path = os.pathsep.join(p for p in (str(SOURCE), os.environ.get("PYTHONPATH", "")) if p)
    environment = {**os.environ, "PYTHONPATH": path, "TENSORJIT_CACHE_DIR": str(cache), **(env or {})}
    environment.pop("TENSORJIT_LOGS", None)
    result = subprocess.run([sys.executable, str(script), *arguments], capture_output=True, text=True,
                            env=environment, cwd=script.parent, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def compiled_nothing(result: dict) -> bool:
    return not any(result["compiled"].values())
