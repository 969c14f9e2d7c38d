"""mkdocs hook: links from a page to repository files outside docs/ (`../guest-examples/chat`, `../wit/llm.wit`).

The pages link to the repository's files with relative paths, which work where the Markdown is read (GitHub, an
editor); the site holds only docs/. So each such link must name a file or directory that exists (else a warning,
which `mkdocs build --strict` turns into a failure), and it becomes a link into `repo_url` when mkdocs.yml sets one,
else its text with the path beside it.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

LOG = logging.getLogger("mkdocs.hooks.repo_links")  # under "mkdocs": --strict counts its warnings
LINK = re.compile(r"\[([^\]\n]+)\]\((\.\./[^)\s#]*)(#[^)\s]*)?\)")
FENCE = re.compile(r"^\s*```", re.M)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    docs = Path(config["docs_dir"]).resolve()
    repo = docs.parent
    page_dir = (docs / page.file.src_path).parent
    repo_url = (config.get("repo_url") or "").rstrip("/")

    def rewrite(match: re.Match[str]) -> str:
        text, target, anchor = match.group(1), match.group(2), match.group(3) or ""
        path = (page_dir / target).resolve()
        if path.is_relative_to(docs):
            return match.group(0)  # a page or file of the site: mkdocs checks it
        if not path.is_relative_to(repo) or not path.exists():
            LOG.warning("%s links to %s, which is not a file of the repository", page.file.src_path, target)
            return match.group(0)
        rel = path.relative_to(repo).as_posix()
        if repo_url:
            kind = "tree" if path.is_dir() else "blob"
            return f"[{text}]({repo_url}/{kind}/HEAD/{rel}{anchor})"
        return text if rel in text else f"{text} (`{rel}`)"

    # Code blocks are left as they are (every other part of a fenced block's split is inside the fence).
    parts = FENCE.split(markdown)
    fences = FENCE.findall(markdown)
    out = [part if i % 2 else LINK.sub(rewrite, part) for i, part in enumerate(parts)]
    return "".join(p + (fences[i] if i < len(fences) else "") for i, p in enumerate(out))
