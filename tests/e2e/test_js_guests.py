"""JavaScript guests (componentize-js) end to end: the behaviour that matters most, on both built-in models, compared
with the Python API on this machine (tests/guests/js_probe/app.js), and the tooling a JavaScript user meets:
`llmhost new --lang js`, build errors, bindings, `llmhost wit`."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from llmhost import App, Host, InferencingParams
from llmhost.interfaces.versions import CURRENT, VERSIONS

from .conftest import MODELS
from .test_examples import REPO

pytestmark = [pytest.mark.model, pytest.mark.wasm]
LLMHOST = str(REPO / ".venv" / "bin" / "llmhost")
PROMPT = "The capital of France is"


def greedy(max_tokens: int, stop: tuple[str, ...] = ()) -> InferencingParams:
    return InferencingParams(max_tokens=max_tokens, stop=stop, temperature=0.0, repeat_penalty=1.0)


@pytest.fixture(scope="module")
def js_probe(real_host: Host, guest_wasm: dict[str, Path]) -> App:
    return real_host.load(guest_wasm["js_probe"])


def probe(app: App, *args: str) -> Any:
    done = app.run_captured(list(args))
    assert done.exit_code == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("model", MODELS)
def test_infer_with_stops_and_usage_equals_the_python_api(js_probe: App, real_host: Host, model: str) -> None:
    for stops in ([], ["\n"], [" of"]):
        got = probe(js_probe, "infer", model, PROMPT, "24", json.dumps(stops))
        want = real_host.infer(model, PROMPT, greedy(24, tuple(stops)))
        assert got["text"] == want.text and got["finish"] == want.finish_reason.value
        assert got["usage"] == {"prompt": want.usage.prompt_token_count, "generated": want.usage.generated_token_count}


@pytest.mark.parametrize("model", MODELS)
def test_stream_events_join_into_the_infer_result(js_probe: App, real_host: Host, model: str) -> None:
    events = probe(js_probe, "stream", model, PROMPT, "12")
    *chunks, done = events
    want = real_host.infer(model, PROMPT, greedy(12))
    assert "".join(c["chunk"] for c in chunks) == want.text
    assert done["done"] == want.finish_reason.value and done["usage"]["generated"] == want.usage.generated_token_count
    assert sum(len(c["ids"]) for c in chunks) <= want.usage.generated_token_count


@pytest.mark.parametrize("model", MODELS)
def test_sequences_fork_truncate_and_regenerate(js_probe: App, real_host: Host, model: str) -> None:
    got = probe(js_probe, "seq", model, PROMPT)
    assert got["first"] and got["again"] == got["first"]  # truncated back to the prompt, greedy again
    assert got["text"] == PROMPT + got["again"] and got["forkText"] == PROMPT + got["first"] + " And"
    assert len(got["ids"]) > len(real_host.tokenize(model, PROMPT)) and got["forkLen"] > len(got["ids"])


def test_errors_are_thrown_with_the_wit_variant(js_probe: App) -> None:
    got = probe(js_probe, "error", MODELS[0])
    assert got["unknown"]["error"]["tag"] == "model-not-supported"
    assert got["invalid"]["error"]["tag"] == "invalid-input" and "top-p" in got["invalid"]["error"]["val"]


def cli(*args: str, cwd: Path, cache_dir: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "LLMHOST_CACHE_DIR": str(cache_dir), **(env or {})}
    environment.pop("LLMHOST_CONFIG", None)
    return subprocess.run([LLMHOST, *args], cwd=cwd, env=environment, capture_output=True, text=True, timeout=600)


def test_new_js_guests_build_and_run(tmp_path: Path, llmhost_cache_dir: Path, real_host: Host) -> None:
    made = cli("new", "greeter", "--lang", "js", cwd=tmp_path, cache_dir=llmhost_cache_dir)
    assert made.returncode == 0, made.stderr
    assert {p.name for p in (tmp_path / "greeter").iterdir()} == {"app.js", "package.json", "README.md"}
    assert "# greeter" in (tmp_path / "greeter" / "README.md").read_text()
    built = cli("build", "greeter", "-o", "greeter.wasm", cwd=tmp_path, cache_dir=llmhost_cache_dir)
    assert built.returncode == 0, built.stderr
    ran = cli("run", "greeter.wasm", "--", PROMPT, cwd=tmp_path, cache_dir=llmhost_cache_dir)
    assert ran.returncode == 0, ran.stderr
    want = real_host.infer(MODELS[0], PROMPT, InferencingParams(max_tokens=32, stop=("\n",), temperature=0.0))
    assert ran.stdout.split("\n")[0] == want.text
    served = cli("new", "web", "--lang", "js", "--template", "http-app", cwd=tmp_path, cache_dir=llmhost_cache_dir)
    assert served.returncode == 0, served.stderr
    built = cli("build", "web", "-o", "web.wasm", cwd=tmp_path, cache_dir=llmhost_cache_dir)
    assert built.returncode == 0 and (tmp_path / "web.wasm").stat().st_size > 1_000_000, built.stderr
    refused = cli("new", "oai", "--lang", "js", "--template", "mcp-tool", cwd=tmp_path, cache_dir=llmhost_cache_dir)
    assert refused.returncode != 0 and "--lang js" in refused.stderr


def test_build_errors_name_the_line_and_the_missing_tool(tmp_path: Path, llmhost_cache_dir: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "app.js").write_text("export function run(args) {\n  return 0\n}\nlet x = ;\n")
    done = cli("build", "broken", "-o", "b.wasm", cwd=tmp_path, cache_dir=llmhost_cache_dir)
    assert done.returncode != 0 and "app.js:4" in done.stderr and "SyntaxError" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) <= 4
    no_node = cli(
        "build", "broken", "-o", "b.wasm", cwd=tmp_path, cache_dir=llmhost_cache_dir, env={"PATH": "/nowhere"}
    )
    assert no_node.returncode != 0 and "Node.js" in no_node.stderr and len(no_node.stderr.strip().splitlines()) == 1


def test_bindings_and_wit_for_other_toolchains(tmp_path: Path, llmhost_cache_dir: Path) -> None:
    hello = str(REPO / "guest-examples" / "hello-js")
    done = cli("bindings", hello, "-o", "types", cwd=tmp_path, cache_dir=llmhost_cache_dir)
    assert done.returncode == 0, done.stderr
    declarations = "\n".join(p.read_text() for p in (tmp_path / "types").rglob("*.d.ts"))
    assert "export function infer(" in declarations and "maxTokens" in declarations
    done = cli("wit", "-o", "wit", cwd=tmp_path, cache_dir=llmhost_cache_dir)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "wit" / "llm.wit").read_text().startswith(f"package llmhost:llm@{CURRENT};")
    assert (tmp_path / "wit" / "deps" / "keyvalue" / "store.wit").is_file()  # the standard packages it imports
    for version in VERSIONS[:-1]:
        assert (tmp_path / "wit" / version / "llm.wit").read_text().startswith(f"package llmhost:llm@{version};")
