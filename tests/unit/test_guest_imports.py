"""toolchains/imports.py: every module a guest's own code imports, wherever it does, found by `ast`."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmhost.toolchains.errors import BuildError
from llmhost.toolchains.imports import SDK_MODULES, includes, scan, snapshot_imports


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def by_module(root: Path) -> dict[str, tuple[str, bool]]:
    return {s.module: (s.where, s.optional) for s in scan(root)}


def test_imports_in_functions_methods_conditionals_and_import_module_literals(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "app.py": (
                "import json\n"
                "class W:\n"
                "    def run(self):\n"
                "        import csv\n"
                "        if True:\n"
                "            from xml.etree import ElementTree\n"
                "        import importlib\n"
                "        importlib.import_module('fractions')\n"
                "        return __import__(compute())\n"
            ),
        },
    )
    found = by_module(root)
    assert found["json"] == ("app.py:1", False)
    assert found["csv"] == ("app.py:4", False)
    assert found["xml.etree"] == ("app.py:6", True)  # conditional: imported when it can be, never failing a build
    assert found["xml.etree.ElementTree"][1] is True  # a name from a module may be a submodule: tried
    assert found["fractions"] == ("app.py:8", False)


def test_type_checking_imports_are_skipped_and_platform_conditionals_are_optional(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "app.py": (
                "import sys\nfrom typing import TYPE_CHECKING\nimport vendored\n"
                "if TYPE_CHECKING:\n    import typing_extensions\nelse:\n    import decimal\n"
                "if sys.platform == 'win32':\n    import winreg\n"
            ),
            # a package vendored into the guest: imported only optionally, so are its own imports
            "vendored/__init__.py": "try:\n    from . import speedups\nexcept ImportError:\n    speedups = None\n",
            "vendored/speedups.py": "import _vendored_native\n",
        },
    )
    found = by_module(root)
    assert "typing_extensions" not in found and found["decimal"][1] is False  # the branch that runs
    assert found["winreg"][1] is True
    assert found["_vendored_native"][1] is True  # reached only through an optional import


def test_an_import_in_a_try_that_catches_import_errors_is_optional(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "app.py": (
                "try:\n    import ujson as json\nexcept ImportError:\n    import json\n"
                "try:\n    import tomli\nexcept ValueError:\n    pass\n"
                "try:\n    import yaml\nexcept (OSError, ModuleNotFoundError):\n    yaml = None\n"
            ),
        },
    )
    found = by_module(root)
    assert found["ujson"][1] is True and found["json"][1] is False  # the fallback itself is required
    assert found["tomli"][1] is False  # a try that does not catch ImportError does not make it optional
    assert found["yaml"][1] is True


def test_own_modules_are_followed_and_a_script_the_app_never_imports_is_not_the_guests(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "app.py": "def run():\n    import helpers\n    from pkg import tools\n",
            "helpers.py": "def f():\n    import statistics\n",
            "pkg/__init__.py": "",
            "pkg/tools.py": "from . import data\ndef g():\n    from .data import TABLE\n    import heapq\n",
            "pkg/data.py": "import bisect\nTABLE = 1\n",
            "serve_locally.py": "import http.server\n",  # a tool beside the guest
        },
    )
    found = by_module(root)
    assert {"helpers", "statistics", "pkg", "pkg.tools", "pkg.data", "heapq", "bisect"} <= set(found)
    assert found["statistics"] == ("helpers.py:2", False)
    assert found["bisect"] == ("pkg/data.py:1", False)
    assert "http.server" not in found


def test_includes_and_the_sdk_are_always_imported(tmp_path: Path) -> None:
    root = write(
        tmp_path, {"app.py": "import wit_world\n", "pyproject.toml": '[tool.llmhost]\ninclude = ["colorsys"]\n'}
    )
    assert includes(root) == ["colorsys"]
    modules = [s.module for s in snapshot_imports(root)]
    assert modules[: len(SDK_MODULES)] == list(SDK_MODULES)
    assert "colorsys" in modules and "wit_world" not in modules  # the bindings exist only inside the build
    write(root, {"pyproject.toml": "[tool.llmhost]\ninclude = 'colorsys'\n"})
    with pytest.raises(BuildError, match=r"\[tool.llmhost\] include must be a list"):
        includes(root)


def test_a_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    root = write(tmp_path, {"app.py": "import helpers\n", "helpers.py": "def f(:\n"})
    with pytest.raises(BuildError, match=r"helpers\.py:1"):
        scan(root)
