"""Unified diffs of whole files, as bytes that ``git apply`` / ``patch -p1`` accept."""

from __future__ import annotations

import difflib
import re

_LINE = re.compile(rb"[^\n]*\n|[^\n]+")


def split_lines(data: bytes) -> list[bytes]:
    """Lines with their terminators; only ``\\n`` ends a line (``\\r\\n`` stays intact)."""
    return _LINE.findall(data)


def _range(start: int, length: int) -> str:
    if length == 1:
        return f"{start + 1}"
    if length == 0:
        return f"{start},0"
    return f"{start + 1},{length}"


def unified_diff(old: bytes, new: bytes, path: str, context: int = 3) -> bytes:
    """A ``--- a/path`` / ``+++ b/path`` patch from ``old`` to ``new`` (empty if equal)."""
    a, b = split_lines(old), split_lines(new)
    out: list[bytes] = []
    name = path.encode("utf-8", "surrogateescape")
    for group in difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(context):
        if not out:
            out += [b"--- a/" + name + b"\n", b"+++ b/" + name + b"\n"]
        first, last = group[0], group[-1]
        a_range = _range(first[1], last[2] - first[1])
        b_range = _range(first[3], last[4] - first[3])
        out.append(f"@@ -{a_range} +{b_range} @@\n".encode())
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [_content(b" ", line) for line in a[i1:i2]]
                continue
            out += [_content(b"-", line) for line in a[i1:i2]]
            out += [_content(b"+", line) for line in b[j1:j2]]
    return b"".join(out)


def _content(prefix: bytes, line: bytes) -> bytes:
    if line.endswith(b"\n"):
        return prefix + line
    return prefix + line + b"\n\\ No newline at end of file\n"


def old_line_of(old: bytes, new: bytes):
    """A function mapping a line of ``new`` to the line of ``old`` it came from (1-based).

    Unchanged lines map exactly; a line inside a rewritten region maps to the region's first
    old line. Used to point at the file on disk when only a preview (``--diff``) was made.
    """
    opcodes = difflib.SequenceMatcher(None, split_lines(old), split_lines(new), autojunk=False).get_opcodes()

    def mapped(line: int) -> int:
        index = line - 1
        for tag, i1, i2, j1, j2 in opcodes:
            if j1 <= index < j2 or (j1 == j2 == index):
                return i1 + (index - j1) + 1 if tag == "equal" else i1 + 1
        return line

    return mapped
