"""guest-examples/openai-compat's request checking (plain Python), loaded in the test process as the guest loads it:
validate.py with its sibling modules importable."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

VALIDATE = Path(__file__).resolve().parents[1] / "guest-examples" / "openai-compat" / "validate.py"


def load_validate(name: str = "openai_compat_validate") -> ModuleType:
    folder = str(VALIDATE.parent)
    sys.path.insert(0, folder)
    try:
        spec = importlib.util.spec_from_file_location(name, VALIDATE)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(folder)
        sys.modules.pop("checks", None)  # the guest's own name: not left for other imports in the test process
