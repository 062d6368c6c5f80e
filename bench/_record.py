"""The header every benchmark record carries, and where records go.

Each benchmark appends one JSON line per run to a file under
``bench/results/``: GPU name, UTC date, commit and torch version, then its
own settings and rows, so runs can be compared over time.
"""
from __future__ import annotations

import datetime
import json
import os
import subprocess

import torch


def new_record(benchmark: str, device: torch.device | None, commit: str | None = None, **fields) -> dict:
    """A record for ``benchmark`` run on ``device``; ``commit`` defaults to
    this checkout's HEAD, with ``+dirty`` when tracked files differ from it
    (pass it where the run has no .git, or a stale one, as on the GPU machine)."""
    if commit is None:
        here = os.path.dirname(os.path.abspath(__file__))
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=here).stdout.strip()
        # tracked files changed since HEAD: the run is not HEAD's code
        if commit and subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=here).returncode == 1:
            commit += "+dirty"
    gpu = torch.cuda.get_device_name(device) if device is not None and device.type == "cuda" else None
    return dict(benchmark=benchmark, gpu=gpu,
                date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                commit=commit, torch=torch.__version__, **fields)


def append_record(path: str | None, record: dict) -> None:
    """Append ``record`` as one JSON line to ``path`` (nothing when None)."""
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
