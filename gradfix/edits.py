"""Each finding's own edit, cut out of one fix pass over the whole file.

SARIF fixes and interactive review show what one finding's fix changes. Fixing each finding
alone costs a LibCST pass per finding (quadratic in findings per file); instead the file is
fixed once with every fix, and the change is split by where each finding's edited nodes were:
the line diff of old and new text, refined to characters inside each changed region, gives
small chunks, and a chunk belongs to the findings whose nodes it touches. Chunks outside every
node are import changes: an added import goes with each finding that asked for one; a removed
import only with a finding that was the only one to ask (fixed alone, a finding leaves an
import that other code still uses).
"""

from __future__ import annotations

import bisect
import difflib
import re
from typing import Mapping

from gradfix.diff import line_opcodes
from gradfix.model import Span, TextEdit

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\n|\r)|[^\r\n]+")
# Changed regions up to this size are matched character by character; bigger ones stay whole.
_CHAR_DIFF_MAX = 4000


def _lines(text: str) -> list[str]:
    return _LINE.findall(text)


def _starts(lines: list[str]) -> list[int]:
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    return starts


def _char_chunks(old: str, new: str, s: int, e: int, ns: int, ne: int) -> list[tuple[int, int, int, int]]:
    while s < e and ns < ne and old[s] == new[ns]:
        s, ns = s + 1, ns + 1
    while e > s and ne > ns and old[e - 1] == new[ne - 1]:
        e, ne = e - 1, ne - 1
    if s == e and ns == ne:
        return []
    if e - s > _CHAR_DIFF_MAX or ne - ns > _CHAR_DIFF_MAX:
        return [(s, e, ns, ne)]
    matcher = difflib.SequenceMatcher(None, old[s:e], new[ns:ne], autojunk=False)
    return [(s + i1, s + i2, ns + j1, ns + j2) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def own_edits(
    old: str,
    new: str,
    node_spans: Mapping[int, list[Span]],
    imports: Mapping[int, tuple[bool, bool]],
) -> dict[int, tuple[TextEdit, ...]]:
    """For each finding index of ``node_spans``: the replacements in ``old`` that are its own.

    ``node_spans`` holds the spans (LibCST positions in ``old``) of the nodes each finding's
    edits replaced; ``imports`` whether it asked to add / remove imports.
    """
    a, b = _lines(old), _lines(new)
    at_a, at_b = _starts(a), _starts(b)
    chunks: list[tuple[int, int, int, int]] = []
    for tag, i1, i2, j1, j2 in line_opcodes(a, b):
        if tag != "equal":
            chunks += _char_chunks(old, new, at_a[i1], at_a[i2], at_b[j1], at_b[j2])

    def offset(line: int, col: int) -> int:
        return at_a[min(line - 1, len(a))] + col

    def start(span: Span) -> int:
        # A node that starts its line owns the indentation before it and the blank and comment
        # lines right above it (LibCST's leading lines): a fix that re-indents it or puts a
        # statement (a helper function) before it changes the text there.
        line = min(span.line - 1, len(a))
        begin = at_a[line] + span.col
        if old[at_a[line] : begin].strip(" \t\f"):
            return begin
        while line > 0 and (not a[line - 1].strip(" \t\f\r\n") or a[line - 1].lstrip(" \t\f").startswith("#")):
            line -= 1
        return at_a[line]

    def end(span: Span) -> int:
        # A node that ends its line (but for a comment) owns the rest of it and the line break:
        # a statement a fix adds after it starts there.
        line = min(span.end_line - 1, len(a) - 1)
        finish = at_a[line] + span.end_col
        rest = old[finish : at_a[line + 1]] if line >= 0 else ""
        return at_a[line + 1] if rest.strip() == "" or rest.strip().startswith("#") else finish

    spans = [(s, i) for i, found in node_spans.items() for s in found]
    near = _Ranges([(start(s), offset(s.end_line, s.end_col), i) for s, i in spans])
    wide = _Ranges([(start(s), end(s), i) for s, i in spans])
    adders = {i for i, (add, _) in imports.items() if add}
    removers = {i for i, (_, remove) in imports.items() if remove}
    askers = adders | removers
    # The nodes themselves first; their line ends only for what no node claims.
    owners = [near.owners(s, e) or wide.owners(s, e) for s, e, _, _ in chunks]
    # An unclaimed chunk between two chunks of the same finding (a blank or comment line its
    # fix re-indents or drops) is that finding's; elsewhere it is an import change.
    before: list[set[int]] = []
    last: set[int] = set()
    for found in owners:
        before.append(last)
        last = found or last
    after: list[set[int]] = [set()] * len(owners)
    last = set()
    for k in range(len(owners) - 1, -1, -1):
        after[k] = last
        last = owners[k] or last
    for k, (s, e, ns, ne) in enumerate(chunks):
        if not owners[k]:
            owners[k] = (before[k] & after[k]) or _import_owners(s == e, ns == ne, adders, removers, askers)
    out: dict[int, list[TextEdit]] = {}
    run_start: dict[int, tuple[int, int, int]] = {}  # finding -> (last chunk index, old start, new start)
    for k, ((s, e, ns, ne), found) in enumerate(zip(chunks, owners)):
        for i in found:
            edits = out.setdefault(i, [])
            last = run_start.get(i)
            if last is not None and last[0] == k - 1:
                # Consecutive chunks of one finding: one replacement, the text between included.
                edits[-1] = TextEdit(last[1], e, new[last[2] : ne])
                run_start[i] = (k, last[1], last[2])
            else:
                edits.append(TextEdit(s, e, new[ns:ne]))
                run_start[i] = (k, s, ns)
    return {i: tuple(edits) for i, edits in out.items() if i in node_spans}


class _Ranges:
    """(start, end, finding) ranges of old text; which findings a chunk touches."""

    def __init__(self, ranges: list[tuple[int, int, int]]):
        self.ranges = sorted(ranges)
        self.starts = [r[0] for r in self.ranges]
        self.reach = []  # reach[k]: the furthest end of ranges[0..k]
        for r in self.ranges:
            self.reach.append(max(r[1], self.reach[-1] if self.reach else r[1]))

    def owners(self, s: int, e: int) -> set[int]:
        found = set()
        k = bisect.bisect_right(self.starts, e) - 1
        while k >= 0 and self.reach[k] >= s:
            rs, re_, i = self.ranges[k]
            if (s < re_ and rs < e) or (s == e and rs <= s <= re_) or (rs == re_ and s <= rs <= e):
                found.add(i)
            k -= 1
        return found


def _import_owners(insertion: bool, deletion: bool, adders: set, removers: set, askers: set) -> set:
    if len(askers) == 1:
        return set(askers)
    if insertion and adders:
        return set(adders)
    if deletion and len(removers) == 1:
        return set(removers)
    if not removers and adders:
        return set(adders)
    return set()
