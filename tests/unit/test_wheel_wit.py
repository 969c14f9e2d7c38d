"""The wheel ships every WIT file that wit/ holds: setup.py's package data globs are checked by setuptools' own
build_py, which copies exactly what a wheel would carry (a version missing from the globs failed a user's build
from a wheel: "it has 0.1.0, 0.2.0, 0.2.1, 0.2.2, 0.2.4")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_wheel_ships_every_wit_file_of_the_repository(tmp_path: Path) -> None:
    out = tmp_path / "lib"
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(out)],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=300,
    )
    shipped = {p.relative_to(out / "llmhost" / "wit").as_posix() for p in (out / "llmhost" / "wit").rglob("*.wit")}
    held = {p.relative_to(REPO / "wit").as_posix() for p in (REPO / "wit").rglob("*.wit")}
    assert held, "wit/ holds no WIT file"
    assert shipped == held, f"missing from the wheel: {sorted(held - shipped)}; extra: {sorted(shipped - held)}"
