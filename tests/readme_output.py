"""README commands and their illustrative output, checked in a way that holds on any x86-64 machine.

A README shows the output one machine wrote. Generated text depends on the CPU's kernels and the llama.cpp build
(AVX-512 and AVX2 round differently, and greedy decoding follows the rounding at near-ties), so the tests never
compare it byte for byte. They check what rounding cannot change (the commands succeed, the output has the
README's lines and fixed counts) with `assert_shape`, and compare the generated text with the same request made
through another path on the same machine, in the same test.
"""

from __future__ import annotations

import re
from pathlib import Path

NOTE = "depends on the CPU and the llama.cpp build"  # every README with model output says so


def readme_blocks(readme: Path) -> tuple[list[str], str]:
    """The README's first `sh` block (its commands, blank lines dropped) and the plain block right after it (the
    output it shows)."""
    text = readme.read_text()
    commands = re.search(r"```sh\n(.*?)```", text, re.S)
    output = re.search(r"```sh\n.*?```.*?```\n(.*?)```", text, re.S)
    assert commands and output, f"{readme} needs a ```sh block and an output block after it"
    assert NOTE in " ".join(text.split()), f"{readme} must say that its sample output {NOTE}"
    return [line for line in commands.group(1).splitlines() if line.strip()], output.group(1)


def assert_shape(output: str, expected: str, lines: list[str]) -> list[re.Match[str]]:
    """`output` and the README's `expected` both consist of exactly `lines` (one regular expression a line, matched
    in full). Returns the matches of `output`, so a test can compare their groups with another path."""
    for name, text in (("the README", expected), ("the output", output)):
        got = text.rstrip("\n").split("\n")
        assert len(got) == len(lines), f"{name} has {len(got)} lines, the shape {len(lines)}: {text!r}"
        for line, pattern in zip(got, lines, strict=True):
            assert re.fullmatch(pattern, line), f"{name}: {line!r} does not match {pattern!r}"
    matches = [re.fullmatch(p, line) for p, line in zip(lines, output.rstrip("\n").split("\n"), strict=True)]
    return [m for m in matches if m]
