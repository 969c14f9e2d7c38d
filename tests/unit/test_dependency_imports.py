"""Issue 67: what a guest's installed dependencies import, found statically (toolchains/imports.py); every codec
imported by the generated entry module; a lock that records no machine-local URL (toolchains/pylock.py)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from llmhost.toolchains import pylock
from llmhost.toolchains.imports import entry_source, scan_dependencies, snapshot_imports


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_dependencys_function_level_imports_are_followed_all_optional(tmp_path: Path) -> None:
    site = write(
        tmp_path / "site",
        {
            # jinja2's shape: `debug` imported only inside a function, a stdlib module likewise, a typing-only one.
            "tpl/__init__.py": "from .environment import Environment\n",
            "tpl/environment.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import tpl.typing_only\n"
                "def handle_exception():\n    from .debug import rewrite\n    import decimal\n"
            ),
            "tpl/debug.py": "def rewrite():\n    import linecache\n",
            "tpl/unused.py": "import nothing_at_all\n",
            "other/__init__.py": "import never_reached\n",
        },
    )
    found = {s.module: s for s in scan_dependencies(site, ["tpl"])}
    assert {"tpl.environment", "tpl.debug", "decimal", "linecache"} <= set(found)
    assert found["tpl.debug"].where == "tpl/environment.py:5"
    assert all(s.optional for s in found.values())  # a dependency's imports never fail the build
    assert "tpl.typing_only" not in found and "tpl.unused" not in found and "never_reached" not in found


def test_a_package_importing_by_computed_names_gets_all_its_modules(tmp_path: Path) -> None:
    site = write(
        tmp_path / "site",
        {
            # markdown's shape: extensions loaded with importlib.import_module(name).
            "md/__init__.py": "import importlib\ndef load(name):\n    return importlib.import_module(name)\n",
            "md/extensions/__init__.py": "",
            "md/extensions/tables.py": "import textwrap\n",
            "md/__main__.py": "raise SystemExit(run())\n",
            "md/tests/test_x.py": "import pytest\n",
        },
    )
    found = {s.module for s in scan_dependencies(site, ["md"])}
    assert {"md.extensions", "md.extensions.tables", "textwrap"} <= found
    assert "md.__main__" not in found and "md.tests.test_x" not in found and "pytest" not in found


def test_the_snapshot_covers_the_dependencies_the_guest_imports(tmp_path: Path) -> None:
    app = write(tmp_path / "app", {"app.py": "def run():\n    import tpl\n"})
    site = write(tmp_path / "site", {"tpl/__init__.py": "def f():\n    from . import debug\n", "tpl/debug.py": ""})
    assert "tpl.debug" not in {s.module for s in snapshot_imports(app)}
    assert "tpl.debug" in {s.module for s in snapshot_imports(app, site)}


def test_the_entry_imports_every_codec_and_writes_no_bytecode_beside_the_guest(monkeypatch: pytest.MonkeyPatch) -> None:
    source = entry_source("prelude", "app", [])
    namespace: dict[str, Any] = {}
    codecs = source[source.index("def _llmhost_codecs") : source.index("def _llmhost_snapshot_imports")]
    exec(codecs, namespace)  # the same function the guest runs, here in the host's Python
    imported: list[str] = []
    real = importlib.import_module
    monkeypatch.setattr(importlib, "import_module", lambda name: imported.append(name) or real(name))
    namespace["_llmhost_codecs"]()
    assert {"encodings.unicode_escape", "encodings.idna", "encodings.cp1252", "encodings.mbcs"} <= set(imported)
    assert "_llmhost_codecs()" in source[source.index("def _llmhost_snapshot_imports") :]
    assert "sys.dont_write_bytecode = True" in source
    assert source.index("sys.dont_write_bytecode = True") < source.index("import prelude")


def test_the_lock_records_no_machine_local_url(tmp_path: Path) -> None:
    guest = tmp_path / "guest"
    guest.mkdir()
    assert pylock.located(guest, "file:///opt/pypi/files/jinja2-3.1.6-py3-none-any.whl") == (None, None)
    assert pylock.located(guest, "http://mirror.local/x-1.0-py3-none-any.whl") == (None, None)
    https = "https://files.pythonhosted.org/packages/x-1.0-py3-none-any.whl"
    assert pylock.located(guest, https) == (https, None)
    assert pylock.located(guest, (guest / "wheels" / "x.whl").as_uri()) == (None, "wheels/x.whl")
    digest = "a" * 64
    packages = [
        pylock.Package("local", "1.0", "wheel", "local-1.0-py3-none-any.whl", sha256=digest),
        pylock.Package("remote", "2.0", "wheel", "remote-2.0-py3-none-any.whl", https, sha256=digest),
    ]
    pylock.write(guest, pylock.render(("local", "remote"), packages))
    text = (guest / pylock.LOCK_FILE).read_text()
    assert "file:" not in text and text.count("url = ") == 1
    lock = pylock.read(guest)
    assert lock is not None and [(p.name, p.version, p.url, p.sha256) for p in lock.packages] == [
        ("local", "1.0", None, digest),
        ("remote", "2.0", https, digest),
    ]


def test_no_committed_lock_holds_a_machine_local_url() -> None:
    repo = Path(__file__).resolve().parents[2]
    locks = [*repo.glob("guest-examples/*/pylock.toml"), *repo.glob("tests/guests/*/pylock.toml")]
    assert len(locks) >= 3
    for path in locks:
        assert "file:///" not in path.read_text(), path
