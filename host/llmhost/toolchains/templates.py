"""`llmhost new NAME --template T [--lang js]`: a new guest directory copied from one of the guest examples.

The templates are the examples themselves (guest-examples/, shipped in the package as `llmhost/examples/`), so
every template is an example that the example tests build and run as their READMEs say. A template that needs
grants carries them in its `llmhost.toml`: an http-app's is an app config serving the directory itself
(`llmhost serve -c llmhost.toml --watch`), a command's a host config (`llmhost run DIR` reads it).
"""

from __future__ import annotations

import re
from pathlib import Path

# template name -> example directory
TEMPLATES = {
    "command": "hello",
    "http-app": "http-hello",
    "openai-compat": "openai-compat",
    "chat": "chat",  # the chat API, the conversation kept in key-value, streamed (SSE)
    "rag": "rag-http",  # embeddings, the index kept in key-value, retrieval, an answer that reports its passages
    "mcp-tool": "mcp-tools",
    "agent": "agent",  # tools over the outbound allow-list
}
LANGS = ("python", "js")
# --lang js: template name -> example directory (the JavaScript examples)
JS_TEMPLATES = {
    "command": "hello-js",
    "http-app": "http-hello-js",
    "chat": "chat-js",  # the chat API, the conversation kept in key-value, streamed (SSE)
    "rag": "rag-js",  # embeddings, the index kept in key-value, retrieval, an answer that reports its passages
    "agent": "agent-js",  # tools over the outbound allow-list (the API: guest-examples/agent/weather_api.py)
}
FILES = ("README.md", "pyproject.toml")  # and every .py file: app.py and the modules it imports (openai-compat)
CONFIG_FILE = "llmhost.toml"  # an example's config (its grants), copied when it has one (agent)
JS_FILES = ("README.md", "package.json", "app.js")


class TemplateError(Exception):
    """The guest directory cannot be created; the message names the fix."""


def examples_dir() -> Path:
    """guest-examples/ in a source checkout, else `llmhost/examples` inside the installed package."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parents[2] / "guest-examples", here.parent / "examples"):
        if (candidate / "hello" / "app.py").is_file():
            return candidate
    raise TemplateError(f"the guest templates were not found next to {here} (a broken install? reinstall llmhost)")


def create(target: Path, template: str, lang: str = "python") -> Path:
    """Write `target/` from `template`: app.py, README.md, pyproject.toml (`lang` "js": app.js, README.md,
    package.json), and the example's llmhost.toml (its grants) if it has one; refuses to overwrite anything."""
    if lang not in LANGS:
        raise TemplateError(f"unknown language {lang!r} (--lang: one of {', '.join(LANGS)})")
    templates = JS_TEMPLATES if lang == "js" else TEMPLATES
    if template not in templates:
        if lang == "js" and template in TEMPLATES:
            raise TemplateError(
                f"no JavaScript template {template!r} yet (--lang js: one of {', '.join(templates)}; "
                f"or drop --lang js for the Python one)"
            )
        where = " for --lang js" if lang == "js" else ""
        raise TemplateError(f"unknown template {template!r}{where} (choose one of: {', '.join(templates)})")
    if not target.name or target.name in (".", ".."):
        raise TemplateError(f"{str(target)!r} is not a name for a new directory (e.g. `llmhost new mybot`)")
    if target.exists():
        raise TemplateError(f"{target} already exists (choose another name, or remove it first)")
    example = templates[template]
    source = examples_dir() / example
    files = list(JS_FILES) if lang == "js" else [*FILES, *sorted(p.name for p in source.glob("*.py"))]
    files += [CONFIG_FILE] if (source / CONFIG_FILE).is_file() else []
    files += sorted(str(p.relative_to(source)) for p in (source / "wit").glob("*.wit"))  # a world of its own
    # Everything is read before anything is written: a template that cannot be read leaves no half directory.
    texts = {
        file: _rename((source / file).read_text(encoding="utf-8"), example, target.name, str(target)) for file in files
    }
    for file, text in texts.items():
        (target / file).parent.mkdir(parents=True, exist_ok=True)
        (target / file).write_text(text, encoding="utf-8")
    return target


def _rename(text: str, example: str, name: str, path: str) -> str:
    """The example's text, about the new guest: its name, its path, and the installed `llmhost` command."""
    text = text.replace(f"guest-examples/{example}", path).replace(".venv/bin/llmhost", "llmhost")
    text = text.replace(f"{example}.wasm", f"{name}.wasm")
    text = re.sub(rf"^# {re.escape(example)}$", f"# {name}", text, count=1, flags=re.M)
    text = re.sub(rf'^name = "{re.escape(example)}"$', f'name = "{name}"', text, count=1, flags=re.M)
    text = re.sub(rf'^  "name": "{re.escape(example)}",$', f'  "name": "{name}",', text, count=1, flags=re.M)
    # a WIT package is named in kebab-case: `example:NAME@0.1.0`
    package = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "tools"
    text = re.sub(rf"^package example:{re.escape(example)}@", f"package example:{package}@", text, count=1, flags=re.M)
    return text.replace("From the repository root, after `make install`", "From the directory above it")
