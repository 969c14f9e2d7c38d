"""Running the probe guest (tests/guests/probe) and parsing its one JSON line; shared by every suite."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from llmhost import App


@dataclass(frozen=True)
class ProbeOutcome:
    exit_code: int
    value: Any  # the "ok" value, when the probe succeeded
    error: dict[str, str] | None  # {"kind", "message"}, when it printed an error
    stdout: str
    stderr: str


def run_probe(app: App, *args: str) -> ProbeOutcome:
    """Run the probe guest with `args` and parse its one JSON line."""
    completed = app.run_captured(list(args))
    stdout, stderr = completed.stdout.decode(), completed.stderr.decode()
    lines = stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines else {}
    return ProbeOutcome(completed.exit_code, result.get("ok"), result.get("err"), stdout, stderr)
