"""The served examples with real clients and the real model: their README commands as written (build, serve in
the background, curl), the official `openai` client against openai-compat, and headless Chromium on chat-http."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmhost import Host, InferencingParams
from serve_driver import Server, serving

from .conftest import MODEL, SMOL
from .test_examples import REPO, readme_blocks

pytestmark = [pytest.mark.model, pytest.mark.wasm]
README_PORT = "127.0.0.1:8080"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_served_readme(example: str, workdir: Path, cache_dir: Path) -> tuple[list[str], str, str]:
    """Run the README's commands: `... &` starts the server in the background (on a free port instead of 8080,
    which may be taken), the rest run in order. Returns the commands, the last command's stdout, the expected."""
    commands, expected = readme_blocks(example)
    port = f"127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if k not in ("LLMHOST_CONFIG", "LLMHOST_LISTEN")}
    env["LLMHOST_CACHE_DIR"] = str(cache_dir)
    background: subprocess.Popen[str] | None = None
    last = ""
    try:
        for line in commands:
            argv = shlex.split(line.replace(README_PORT, port).removesuffix("&").strip())
            if argv[0].startswith(".venv/"):
                argv[0] = str(REPO / argv[0])
            argv = [str(REPO / a) if a.startswith("guest-examples/") else a for a in argv]
            if line.rstrip().endswith("&"):
                background = subprocess.Popen(argv, cwd=workdir, env=env, stderr=subprocess.PIPE, text=True)
                server = Server(background)
                server.wait_for_line(r"listening on http://", 240)
                continue
            done = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, (line, done.stderr)
            last = done.stdout
    finally:
        if background is not None:
            background.send_signal(signal.SIGTERM)
            assert background.wait(timeout=30) == 0
    return commands, last, expected


def test_chat_http_readme(tmp_path: Path, llmhost_cache_dir: Path, real_host: Host) -> None:
    commands, output, expected = run_served_readme("chat-http", tmp_path, llmhost_cache_dir)
    assert [c.split()[1] for c in commands] == ["build", "serve", "-sN"]
    # The README's shape: text events, then the done event with the usage (SmolLM2's chat template makes a 34-token
    # prompt; at most 8 tokens).
    usage = r'"usage": \{"prompt_tokens": 34, "completion_tokens": \d\}'
    done = r'event: done\ndata: \{"finish_reason": "(length|stop)", ' + usage + r"\}"
    shapes = []
    for name, text in (("the README", expected), ("the output", output)):
        events = [e for e in text.split("\n\n") if e.strip()]
        assert all(re.fullmatch(r'data: \{"text": "[^\n]*"\}', e) for e in events[:-1]), (name, events)
        assert re.fullmatch(done, events[-1]), (name, events[-1])
        shapes.append(events)
    events = shapes[1]
    # The same chat through the Python API on this machine, on the instruct built-in: the page's model answered.
    body = json.loads(shlex.split(commands[2])[-1])
    params = InferencingParams(max_tokens=body["max_tokens"], temperature=0.0, repeat_penalty=1.1)
    want = real_host.chat(SMOL, [{"role": "user", "content": body["message"]}], params)
    assert "".join(json.loads(e.removeprefix("data: "))["text"] for e in events[:-1]) == want.message.content
    usage = {"prompt_tokens": want.usage.prompt_token_count, "completion_tokens": want.usage.generated_token_count}
    finished = json.loads(events[-1].split("data: ", 1)[1])
    assert finished == {"finish_reason": want.finish_reason.value, "usage": usage}
    assert len(events) - 1 <= want.usage.generated_token_count  # one event per token, or fewer


def test_openai_compat_readme(tmp_path: Path, llmhost_cache_dir: Path, real_host: Host) -> None:
    commands, output, expected = run_served_readme("openai-compat", tmp_path, llmhost_cache_dir)

    def stable(text: str, live: bool) -> dict[str, object]:
        """The response without the fields that differ on every call (checked for shape, and for being fresh)."""
        value = json.loads(text)
        assert re.fullmatch(r"cmpl-[0-9a-f]{24}", value.pop("id"))
        created = value.pop("created")
        assert isinstance(created, int) and (not live or abs(created - time.time()) < 600)
        return value  # type: ignore[no-any-return]

    # The README's response but for the generated text, which is what the same request gives through the Python API
    # on this machine (OpenAI's request: greedy, no repeat penalty).
    got, shown = stable(output, live=True), stable(expected, live=False)
    text = got["choices"][0].pop("text")  # type: ignore[index]
    shown["choices"][0].pop("text")  # type: ignore[index]
    assert got == shown
    request = json.loads(shlex.split(commands[2])[-1])
    params = InferencingParams(
        max_tokens=request["max_tokens"], temperature=0.0, repeat_penalty=1.0, repeat_penalty_last_n_token_count=0
    )
    want = real_host.infer(MODEL, request["prompt"], params)
    assert text == want.text and want.finish_reason.value == "length"


def test_http_hello_js_readme(tmp_path: Path, llmhost_cache_dir: Path, real_host: Host) -> None:
    # The JavaScript http-app example streams the completion, then its finish reason: the README's shape, and the
    # Python API's answer to the same request on this machine.
    commands, output, expected = run_served_readme("http-hello-js", tmp_path, llmhost_cache_dir)
    assert [c.split()[1] for c in commands[:2]] == ["build", "serve"]
    text, finish = output.rstrip("\n").rsplit("\n", 1)
    assert expected.rstrip("\n").rsplit("\n", 1)[1].startswith("finish-reason: ")
    params = InferencingParams(max_tokens=16, stop=("\n",), temperature=0.0, repeat_penalty=1.0)
    want = real_host.infer(MODEL, "The capital of France is", params)
    assert text == want.text and finish == f"finish-reason: {want.finish_reason.value}"


@pytest.fixture(scope="module")
def examples_server(
    http_wasm: dict[str, Path], llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    config = tmp_path_factory.mktemp("examples") / "llmhost.toml"
    config.write_text(
        f"""
[components.chat]
source = "{http_wasm["chat-http"]}"
[components.openai]
source = "{http_wasm["openai-compat"]}"
[routes]
"/" = "chat"
"/v1" = "openai"

# One llama.cpp thread: the browser test runs Chromium on the same 2 cores, and llama.cpp's spinning threads
# slow down a hundredfold when they have to share both cores with it.
[models.gemma-3-270m]
threads = 1
"""
    )
    with serving(["-c", str(config)], llmhost_cache_dir) as server:
        yield server
        assert server.stop() == 0


def test_openai_client_completions(examples_server: Server) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{examples_server.url}/v1", api_key="unused", max_retries=0)
    prompt = "The capital of France is"
    whole = client.completions.create(model="gemma-3-270m", prompt=prompt, max_tokens=8, temperature=0)
    choice = whole.choices[0]
    assert choice.finish_reason == "length" and choice.text
    assert whole.usage is not None
    assert (whole.usage.completion_tokens, whole.usage.total_tokens) == (8, whole.usage.prompt_tokens + 8)
    # A stop string cuts the same greedy text right before its first occurrence.
    stop = choice.text.strip()[-1]
    stopped = client.completions.create(model="gemma-3-270m", prompt=prompt, max_tokens=8, temperature=0, stop=stop)
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].text == choice.text[: choice.text.index(stop)]
    chunks = list(
        client.completions.create(model="gemma-3-270m", prompt=prompt, max_tokens=8, temperature=0, stream=True)
    )
    assert len(chunks) > 2  # streamed piece by piece
    assert "".join(c.choices[0].text for c in chunks) == choice.text
    assert chunks[-1].choices[0].finish_reason == "length"


def test_openai_client_chat(examples_server: Server) -> None:
    from openai import NotFoundError, OpenAI

    client = OpenAI(base_url=f"{examples_server.url}/v1", api_key="unused", max_retries=0)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."}]
    whole = client.chat.completions.create(model="gemma-3-270m", messages=messages, max_tokens=12, temperature=0)  # type: ignore[arg-type]
    message = whole.choices[0].message
    assert message.role == "assistant" and message.content
    assert whole.choices[0].finish_reason in ("stop", "length")
    assert whole.usage is not None and whole.usage.completion_tokens <= 12
    stream = client.chat.completions.create(
        model="gemma-3-270m",
        messages=messages,
        max_tokens=12,
        temperature=0,
        stream=True,  # type: ignore[arg-type]
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    with pytest.raises(NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=messages, max_tokens=2)  # type: ignore[arg-type]


def test_chat_page_in_headless_chromium(examples_server: Server) -> None:
    """A person's view: open the page, type, send, and watch the reply arrive in pieces."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.binary_location = "/usr/bin/chromium"
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        driver.get(examples_server.url + "/")
        assert driver.title == "llmhost chat"
        # The reply's length at every change of the page, seen by the page itself (however fast the machine).
        driver.execute_script(
            "window.replyLengths = [];"
            "new MutationObserver(() => { const r = document.querySelector('.reply');"
            "  if (r) window.replyLengths.push(r.textContent.length); })"
            ".observe(document.getElementById('log'), {childList: true, subtree: true, characterData: true});"
        )
        driver.find_element(By.ID, "message").send_keys("Tell me a story about a dragon.")
        driver.find_element(By.ID, "send").click()
        WebDriverWait(driver, 120).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".reply[data-done-ms]"))
        reply = driver.find_element(By.CSS_SELECTOR, ".reply")
        chunks = int(reply.get_attribute("data-chunks") or 0)
        status = driver.find_element(By.CSS_SELECTOR, ".status").text
        lengths: list[int] = driver.execute_script("return window.replyLengths")
        final = int(driver.execute_script("return document.querySelector('.reply').textContent.length"))
        assert reply.text.strip(), "no reply text"
        # The reply came in more than one chunk (how many depends on the machine's speed: a fast one merges a
        # burst's tokens), and its text grew on screen over several observations before it was whole: never
        # shrinking, with partial lengths on the way, not one jump from empty to the whole reply.
        assert chunks > 1, chunks
        assert lengths == sorted(lengths) and lengths[-1] == final, (lengths, final)
        assert len({n for n in lengths if 0 < n < final}) >= 2, (lengths, final, chunks)
        assert status.startswith("finish: ")
        driver.save_screenshot(str(Path(os.environ.get("TMPDIR", "/tmp")) / "llmhost-chat-page.png"))
    finally:
        driver.quit()
