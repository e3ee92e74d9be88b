"""Unified diffs of whole files, as bytes that ``git apply`` / ``patch -p1`` accept.

Line matching is difflib's on ordinary files. On big ones (a thousand fixes in one file)
difflib's matcher is quadratic, and worse when lines repeat (``return y``, blank lines), so
there the lines common to both ends are set aside and the rest is split at lines that occur
once in each version (patience diff), with difflib inside each small gap. Any split gives a
correct patch; the anchors only decide how small its hunks are.
"""

from __future__ import annotations

import bisect
import difflib
import re
from typing import Sequence

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
    for group in grouped_opcodes(line_opcodes(a, b), context):
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
    opcodes = line_opcodes(split_lines(old), split_lines(new))
    starts = [j1 for _, _, _, j1, _ in opcodes]

    def mapped(line: int) -> int:
        index = line - 1
        # Only the ranges starting at ``index`` and the one before them can hold it.
        first, last = bisect.bisect_left(starts, index) - 1, bisect.bisect_right(starts, index)
        for tag, i1, i2, j1, j2 in opcodes[max(first, 0) : last]:
            if j1 <= index < j2 or (j1 == j2 == index):
                return i1 + (index - j1) + 1 if tag == "equal" else i1 + 1
        return line

    return mapped


Opcode = tuple[str, int, int, int, int]

# Below this many line pairs (after the common ends), difflib's matcher is used as it is.
_DIFFLIB_PAIRS = 250_000


def line_opcodes(a: Sequence, b: Sequence) -> list[Opcode]:
    """difflib-style opcodes turning ``a`` into ``b``, in time near-linear in their length."""
    if len(a) * len(b) <= _DIFFLIB_PAIRS:
        return difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    out: list[Opcode] = []
    _match(a, b, 0, len(a), 0, len(b), out)
    merged: list[Opcode] = []
    for op in out:
        if op[1] == op[2] and op[3] == op[4]:
            continue
        if merged and merged[-1][0] == op[0] == "equal":
            merged[-1] = ("equal", merged[-1][1], op[2], merged[-1][3], op[4])
        elif merged and merged[-1][0] != "equal" and op[0] != "equal":
            last = merged[-1]
            merged[-1] = ("replace", last[1], op[2], last[3], op[4])
        else:
            merged.append(op)
    return [_tag(op) for op in merged]


def _tag(op: Opcode) -> Opcode:
    tag, i1, i2, j1, j2 = op
    if tag == "equal":
        return op
    return ("replace" if i1 < i2 and j1 < j2 else "delete" if i1 < i2 else "insert", i1, i2, j1, j2)


def _match(a: Sequence, b: Sequence, alo: int, ahi: int, blo: int, bhi: int, out: list[Opcode]) -> None:
    stack: list = [(alo, ahi, blo, bhi)]  # ranges to match, and finished opcodes, left to right
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            out.extend(item)
            continue
        alo, ahi, blo, bhi = item
        head = alo
        while head < ahi and head - alo + blo < bhi and a[head] == b[head - alo + blo]:
            head += 1
        prefix = head - alo
        tail = 0
        while ahi - tail > head and bhi - tail > blo + prefix and a[ahi - tail - 1] == b[bhi - tail - 1]:
            tail += 1
        after = [("equal", ahi - tail, ahi, bhi - tail, bhi)] if tail else []
        if prefix:
            out.append(("equal", alo, head, blo, blo + prefix))
        alo, blo, ahi, bhi = head, blo + prefix, ahi - tail, bhi - tail
        if alo == ahi or blo == bhi or (ahi - alo) * (bhi - blo) <= _DIFFLIB_PAIRS:
            for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=False).get_opcodes():
                out.append((tag, i1 + alo, i2 + alo, j1 + blo, j2 + blo))
            out.extend(after)
            continue
        anchors = _unique_common(a, b, alo, ahi, blo, bhi)
        if not anchors:
            out.append(("replace", alo, ahi, blo, bhi))
            out.extend(after)
            continue
        # Gaps between anchors, pushed in reverse so they come off the stack in order.
        todo: list = []
        i, j = alo, blo
        for ai, bj in anchors:
            todo.append((i, ai, j, bj))
            todo.append([("equal", ai, ai + 1, bj, bj + 1)])
            i, j = ai + 1, bj + 1
        todo.append((i, ahi, j, bhi))
        todo.append(after)
        stack.extend(reversed(todo))


def _unique_common(a: Sequence, b: Sequence, alo: int, ahi: int, blo: int, bhi: int) -> list[tuple[int, int]]:
    """Lines occurring once in a[alo:ahi] and once in b[blo:bhi], as (i, j) pairs forming the
    longest chain increasing in both."""
    count_a: dict = {}
    for i in range(alo, ahi):
        count_a[a[i]] = count_a.get(a[i], 0) + 1
    count_b: dict = {}
    where_b: dict = {}
    for j in range(blo, bhi):
        count_b[b[j]] = count_b.get(b[j], 0) + 1
        where_b[b[j]] = j
    pairs = [(i, where_b[a[i]]) for i in range(alo, ahi) if count_a[a[i]] == 1 and count_b.get(a[i]) == 1]
    # Longest increasing subsequence of the j's (patience sorting), O(k log k).
    tops: list[int] = []
    top_index: list[int] = []
    back: list[int] = [-1] * len(pairs)
    for k, (_, j) in enumerate(pairs):
        pile = bisect.bisect_left(tops, j)
        if pile == len(tops):
            tops.append(j)
            top_index.append(k)
        else:
            tops[pile] = j
            top_index[pile] = k
        back[k] = top_index[pile - 1] if pile else -1
    chain = []
    k = top_index[-1] if top_index else -1
    while k != -1:
        chain.append(pairs[k])
        k = back[k]
    return chain[::-1]


def grouped_opcodes(codes: list[Opcode], n: int = 3):
    """Change clusters with up to ``n`` lines of context (difflib's ``get_grouped_opcodes``)."""
    codes = list(codes) or [("equal", 0, 1, 0, 1)]
    if codes[0][0] == "equal":
        tag, i1, i2, j1, j2 = codes[0]
        codes[0] = tag, max(i1, i2 - n), i2, max(j1, j2 - n), j2
    if codes[-1][0] == "equal":
        tag, i1, i2, j1, j2 = codes[-1]
        codes[-1] = tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)
    group: list[Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > n + n:
            group.append((tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)))
            yield group
            group = []
            i1, j1 = max(i1, i2 - n), max(j1, j2 - n)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        yield group
