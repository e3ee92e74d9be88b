"""Form feeds at the start of a line of code (``^L`` before ``def``, as old GNU-style code has).

Python treats such a form feed as whitespace, but LibCST drops it, so a file holding one could
not be fixed at all ("LibCST does not reproduce this file byte for byte"). The fixer therefore
works on the source with those form feeds set aside (the same program: a form feed at a line's
start only resets the column count) and puts each one back at the start of its line, mapped
through the fix by a line diff. A form feed on a line of its own, which LibCST keeps, is left
where it is.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

_LEADING = re.compile(rb"^(\x0c+)(?=[^\r\n\x0c])", re.M)


@dataclass
class SetAside:
    stripped: bytes
    prefixes: dict[int, bytes]  # 0-based line number -> the form feeds that started it

    def restore(self, fixed: bytes) -> bytes:
        """``fixed`` (a fix of ``stripped``) with each form feed back at the start of its line."""
        old = self.stripped.splitlines(keepends=True)
        new = fixed.splitlines(keepends=True)
        target: dict[int, int] = {}
        matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
        for op, i1, i2, j1, j2 in matcher.get_opcodes():
            if op in ("equal", "replace"):  # a rewritten line keeps its form feed
                for k in range(min(i2 - i1, j2 - j1)):
                    target[i1 + k] = j1 + k
        for line, prefix in self.prefixes.items():
            if line in target:
                new[target[line]] = prefix + new[target[line]]
        return b"".join(new)


def set_aside(source: bytes) -> SetAside | None:
    """None when no line of code starts with a form feed (nothing to do)."""
    if b"\x0c" not in source:
        return None
    prefixes = {}
    lines = source.splitlines(keepends=True)
    for number, line in enumerate(lines):
        match = _LEADING.match(line)
        if match:
            prefixes[number] = match.group(1)
            lines[number] = line[match.end(1):]
    if not prefixes:
        return None
    return SetAside(b"".join(lines), prefixes)
