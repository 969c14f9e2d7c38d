"""`llmhost new NAME --template T [--lang js]`: a new guest directory copied from one of the guest examples.

The templates are the examples themselves (guest-examples/, shipped in the package as `llmhost/examples/`), so
every template is an example that the example tests build and run as their READMEs say.
"""

from __future__ import annotations

import re
from pathlib import Path

# template name -> example directory
TEMPLATES = {
    "command": "hello",
    "http-app": "http-hello",
    "openai-compat": "openai-compat",
    "chat": "chat-http",
    "mcp-tool": "mcp-tools",
    "agent": "agent",
}
# --lang js: template name -> example directory (the JavaScript examples)
JS_TEMPLATES = {"command": "hello-js", "http-app": "http-hello-js"}
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
    templates = JS_TEMPLATES if lang == "js" else TEMPLATES
    if template not in templates:
        where = " for --lang js" if lang == "js" else ""
        raise TemplateError(f"unknown template {template!r}{where} (choose one of: {', '.join(templates)})")
    if target.exists():
        raise TemplateError(f"{target} already exists (choose another name, or remove it first)")
    example = templates[template]
    source = examples_dir() / example
    name = target.name
    target.mkdir(parents=True)
    files = list(JS_FILES) if lang == "js" else [*FILES, *sorted(p.name for p in source.glob("*.py"))]
    files += [CONFIG_FILE] if (source / CONFIG_FILE).is_file() else []
    files += sorted(str(p.relative_to(source)) for p in (source / "wit").glob("*.wit"))  # a world of its own
    for file in files:
        text = (source / file).read_text(encoding="utf-8")
        (target / file).parent.mkdir(parents=True, exist_ok=True)
        (target / file).write_text(_rename(text, example, name, str(target)), encoding="utf-8")
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
