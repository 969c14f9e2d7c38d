"""npm dependencies of JavaScript guests (issue 56, part 3): guest-examples/fewshot-js (mustache, bundled with
app.js by esbuild) built and run as its README says, its answer compared with the same request through the Python
API on this machine; a package that needs a Node.js built-in fails the build naming both."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import readme_output as readme
from llmhost import Host, InferencingParams, build_component
from llmhost.toolchains.errors import BuildError

pytestmark = [pytest.mark.model, pytest.mark.wasm]
REPO = Path(__file__).resolve().parents[2]
LLMHOST = str(Path(sys.executable).with_name("llmhost"))


def test_fewshot_js_readme(tmp_path: Path, llmhost_cache_dir: Path, real_host: Host) -> None:
    shutil.copytree(REPO / "guest-examples" / "fewshot-js", tmp_path / "guest-examples" / "fewshot-js")
    commands, expected = readme.readme_blocks(REPO / "guest-examples" / "fewshot-js" / "README.md")
    env = {**os.environ, "LLMHOST_CACHE_DIR": str(llmhost_cache_dir)}
    output = ""
    for line in commands:
        argv = shlex.split(line)
        argv[0] = LLMHOST
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (line, done.stderr)
        output += done.stdout
    exact, answer = expected.rstrip("\n").rsplit("\n", 1)
    assert output.startswith(exact + "\n")  # the build's output path, then the rendered prompt
    got = output.rstrip("\n").rsplit("\n", 1)[1]
    assert answer.startswith("answer:") and got.startswith("answer:")
    prompt = exact.split("\n", 1)[1]
    params = InferencingParams(max_tokens=8, temperature=0.0, repeat_penalty=1.0, stop=["\n"])
    assert got == "answer:" + real_host.infer("gemma-3-270m", prompt, params).text


def test_a_package_needing_a_node_builtin_fails_the_build_naming_both(tmp_path: Path, llmhost_cache_dir: Path) -> None:
    guest = tmp_path / "files"
    guest.mkdir()
    (guest / "app.js").write_text('import fse from "fs-extra";\n\nexport function run(args) {\n  return 0;\n}\n')
    package = {
        "name": "files",
        "type": "module",
        "dependencies": {"fs-extra": "11.2.0"},
        "llmhost": {"world": "command"},
    }
    (guest / "package.json").write_text(json.dumps(package))
    with pytest.raises(BuildError) as refused:
        build_component(guest, tmp_path / "files.wasm", cache_dir=llmhost_cache_dir)
    message = str(refused.value)
    assert "the npm package fs-extra needs the Node.js built-in" in message or "graceful-fs needs" in message, message
    assert any(f"`{b}`" in message for b in ("fs", "path", "os", "constants")), message


def test_an_undeclared_package_names_the_fix(tmp_path: Path, llmhost_cache_dir: Path) -> None:
    guest = tmp_path / "undeclared"
    guest.mkdir()
    (guest / "app.js").write_text(
        'import Mustache from "mustache";\nimport ms from "ms";\n\nexport function run(args) {\n  return 0;\n}\n'
    )
    package = {"name": "u", "type": "module", "dependencies": {"mustache": "4.2.0"}, "llmhost": {"world": "command"}}
    (guest / "package.json").write_text(json.dumps(package))
    with pytest.raises(BuildError, match=r"imports 'ms', which is not installed: add it to package.json"):
        build_component(guest, tmp_path / "u.wasm", cache_dir=llmhost_cache_dir)


@pytest.mark.parametrize(
    ("source", "dependencies", "builtin", "line"),
    [
        ('import fs from "node:fs";\n', None, "fs", 1),
        ('import Mustache from "mustache";\nimport { join } from "path";\n', {"mustache": "4.2.0"}, "path", 2),
        ('// import os from "os" (a comment)\nconst { createHash } = await import("crypto");\n', None, "crypto", 2),
    ],
    ids=["node-prefix", "beside-a-dependency", "dynamic-import"],
)
def test_a_node_builtin_in_the_guest_s_code_is_one_line_naming_it(
    tmp_path: Path, llmhost_cache_dir: Path, source: str, dependencies: dict[str, str] | None, builtin: str, line: int
) -> None:
    """With or without npm dependencies: one line naming the built-in, before anything is installed or built
    (componentize-js would fail at run time with a Node.js stack, esbuild with "add it to package.json")."""
    guest = tmp_path / "builtin"
    guest.mkdir()
    (guest / "app.js").write_text(source + "\nexport function run(args) {\n  return 0;\n}\n")
    package = {"name": "b", "type": "module", "llmhost": {"world": "command"}}
    (guest / "package.json").write_text(json.dumps({**package, "dependencies": dependencies or {}}))
    with pytest.raises(BuildError) as refused:
        build_component(guest, tmp_path / "b.wasm", cache_dir=llmhost_cache_dir)
    message = str(refused.value)
    assert "\n" not in message and f"{guest / 'app.js'}:{line} imports" in message, message
    assert f"`{builtin}` is a Node.js built-in, and a guest has no Node.js runtime" in message
    assert "package.json" not in message
