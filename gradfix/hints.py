"""What gradfix tells a user about a source besides findings: why it does not parse, and
suppression comments that suppress nothing."""

from __future__ import annotations

import re

# `x.cuda(async=True)` (PyTorch <= 0.3): `async` became a reserved word in Python 3.7.
_ASYNC_KEYWORD = re.compile(r"[(,]\s*async\s*=(?!=)")


def syntax_hint(source: bytes | str, line: int | None) -> str:
    """A hint to append to a syntax error at ``line`` (1-based), or ``""``."""
    text = source.decode("utf-8", errors="replace") if isinstance(source, bytes) else source
    lines = text.splitlines()
    if line is None or not 0 < line <= len(lines):
        return ""
    if _ASYNC_KEYWORD.search(lines[line - 1]):
        return " (`async=` keyword argument: `async` is a reserved word since Python 3.7; rename it to `non_blocking=`, e.g. `.cuda(non_blocking=True)`)"
    return ""


_IGNORE_CODES = re.compile(r"#\s*gradfix:\s*ignore\[(?P<codes>[^\]]*)\]", re.IGNORECASE)
_NOQA_CODES = re.compile(r"#\s*noqa:\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*)", re.IGNORECASE)


def unknown_suppression_codes(source: bytes | str, known: tuple[str, ...]) -> list[str]:
    """One note per suppression comment naming a gradfix code that no rule has.

    ``# gradfix: ignore[...]`` codes must each be a code or prefix of a rule; in
    ``# noqa: ...`` only ``GF`` codes are gradfix's (the others belong to other linters).
    """
    return [f"line {number}: {message}" for number, message in suppression_problems(source, known)]


def suppression_problems(source: bytes | str, known: tuple[str, ...]) -> list[tuple[int, str]]:
    """(line, message) for each suppression comment that suppresses nothing (see above)."""
    if isinstance(source, bytes):  # the common case, a file without such comments, decodes nothing
        if b"gradfix" not in source and b"noqa" not in source and b"NOQA" not in source:
            return []
        source = source.decode("utf-8", errors="replace")
    text = source
    if "gradfix" not in text and "noqa" not in text and "NOQA" not in text:
        return []
    notes = []
    for number, line in enumerate(text.splitlines(), start=1):
        if "#" not in line:
            continue
        for pattern, ours in ((_IGNORE_CODES, lambda c: True), (_NOQA_CODES, lambda c: c.startswith("GF"))):
            match = pattern.search(line)
            if match is None:
                continue
            if not match["codes"].strip():
                notes.append((number, f"`{match[0].strip()}` names no rule code: it suppresses nothing"))
            for code in filter(None, re.split(r"[\s,]+", match["codes"].strip().upper())):
                if ours(code) and not any(k.startswith(code) for k in known):
                    notes.append((number, f"unknown rule code {code} in `{match[0].strip()}`: it suppresses nothing"))
    return notes
