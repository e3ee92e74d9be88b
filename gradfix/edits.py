"""Each finding's own edit: what its fix alone would change, from a few fix runs per file.

SARIF fixes, interactive review, LSP quick fixes and JSON show what one finding's fix changes.
Fixing each finding alone costs a LibCST pass per finding (quadratic in findings per file);
instead one run fixes the findings together and each finding's edit is read off positions, not
guessed from a text diff. Every edit of a fix replaces an original node, so the finding's own
edit replaces the text that node covers in the old module (LibCST's whitespace-inclusive span:
its leading comment and blank lines, indentation, line break) with the text its replacement
covers in the new module (found by node identity). That is what the fix alone writes there as
long as the replacement renders alone as it does beside the other fixes: its ancestors are
never edited (an overlapping fix waits for a later run), and fixes that drop or add children of
one parent run separately (how a child renders can depend on its siblings: a default comma, the
``pass`` of an emptied block). A check that the node edits rebuild the new module's text
guards the rest.

Imports are the one part of a fix that depends on the rest of the file: alone, a fix removes an
import only if the uses of it all lie inside the nodes it replaces, and it adds ``import torch``
only where the file lacks it. The findings whose fix alone changes imports are grouped by that
change; one fix-alone run per group gives the group's import edit. A finding whose edit cannot
be read off this way (its rule's fixes did not compile together, a replacement not found again,
an import edit beside its own code) is fixed alone, exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

from gradfix.model import Finding, TextEdit, apply_text_edits

if TYPE_CHECKING:
    from gradfix.fixer import FixRun

# Runs before the findings still waiting (overlapped or sibling fixes) are each fixed alone.
EDIT_PASSES = 10

_LINE_END = re.compile(r"\r\n?|\n")  # LibCST's line breaks


def own_edits(source: bytes, findings: Sequence[Finding | None], build: Callable, path: str) -> dict[int, tuple[TextEdit, ...]]:
    """For each index of a finding (None: not wanted) whose fix changes ``source``: its own
    edit, as replacements in the decoded source."""
    from gradfix.engine import decode_source
    from gradfix.fixer import apply_fixes

    old = decode_source(source)
    out: dict[int, tuple[TextEdit, ...]] = {}
    groups: dict[tuple, list[tuple[int, tuple[TextEdit, ...], bool]]] = {}
    alone: set[int] = set()
    pending = list(findings)
    run = None
    for _ in range(EDIT_PASSES):
        if not any(f is not None for f in pending):
            break
        run = apply_fixes(source, pending, build, path, separate_siblings=True)
        for i in run.dropped:  # its rule's fixes did not compile beside each other
            alone.add(i)
            pending[i] = None
        if not run.applied or run.context is None:
            break
        cut = _Cut(run, old)
        if cut.failed:
            alone |= run.applied
        else:
            alone |= cut.unsure
            for i, edits in cut.edits.items():
                key = cut.import_key.get(i)
                if key:
                    groups.setdefault(key, []).append((i, edits, cut.top_level[i]))
                else:
                    out[i] = edits
        for i in run.applied:
            pending[i] = None
    if run is not None and run.applied:  # still waiting after EDIT_PASSES runs
        alone |= run.waiting
    alone -= {i for members in groups.values() for i, _, _ in members}
    for members in groups.values():
        _import_group(source, old, findings, build, path, members, out, alone)
    for i in sorted(alone):
        edit = _alone(source, old, findings[i], build, path)
        if edit:
            out[i] = edit
    return {i: e for i, e in out.items() if e}


def _alone_text(source: bytes, finding: Finding, build: Callable, path: str) -> str | None:
    from gradfix.engine import decode_source
    from gradfix.fixer import apply_fixes

    run = apply_fixes(source, [finding], build, path)
    if 0 not in run.applied or run.source == source:
        return None
    return decode_source(run.source)


def _alone(source: bytes, old: str, finding: Finding, build: Callable, path: str) -> tuple[TextEdit, ...]:
    new = _alone_text(source, finding, build, path)
    return () if new is None else (_between(old, new),)


def _between(old: str, new: str) -> TextEdit:
    """The one replacement that turns ``old`` into ``new`` (their common ends left alone)."""
    start, shortest = 0, min(len(old), len(new))
    while start < shortest and old[start] == new[start]:
        start += 1
    tail = 0
    while tail < shortest - start and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    return TextEdit(start, len(old) - tail, new[start : len(new) - tail])


def _within(old: str, edit: TextEdit) -> TextEdit:
    inner = _between(old[edit.start : edit.end], edit.new)
    return TextEdit(edit.start + inner.start, edit.start + inner.end, inner.new)


def _import_group(source, old, findings, build, path, members, out, alone) -> None:
    """One fix-alone run of a member gives the import edit the group shares (of a member whose
    edit is inside a statement: one that edits a statement of the module could move where the
    imports go)."""
    members = sorted(members, key=lambda m: m[2])
    first, edits, top_level = members[0]
    truth = _alone_text(source, findings[first], build, path)
    if truth is None or top_level:
        out[first] = () if truth is None else (_between(old, truth),)
        alone.update(i for i, _, _ in members[1:])
        return
    nodes_only = apply_text_edits(old, edits)
    if nodes_only == truth:  # e.g. an import kept for `__all__`: no import edit
        out.update((i, e) for i, e, _ in members)
        return
    change = _between(nodes_only, truth)
    if edits and change.end > min(e.start for e in edits):  # not wholly before its own code
        out[first] = (_between(old, truth),)
        alone.update(i for i, _, _ in members[1:])
        return
    out[first] = (change, *edits)
    for i, mine, top_level in members[1:]:
        if top_level or (mine and min(e.start for e in mine) <= change.end):
            alone.add(i)  # where imports go could depend on its own edit
        else:
            out[i] = (change, *mine)


@dataclass
class _Cut:
    """The node edits of each finding one run applied, read off old and new positions."""

    run: FixRun
    old: str
    edits: dict[int, tuple[TextEdit, ...]] = field(default_factory=dict)
    unsure: set[int] = field(default_factory=set)
    failed: bool = False  # the node edits together do not rebuild the run's text
    import_key: dict[int, tuple] = field(default_factory=dict)
    top_level: dict[int, bool] = field(default_factory=dict)  # an edited node is a statement of the module

    def __post_init__(self):
        import libcst as cst

        ctx, edited = self.run.context, self.run.edited
        edits = [e for i in self.run.applied for e in self.run.edits[i]]
        old_text, old_pos = _rendered_spans(ctx.module, {e.node for e in edits})
        new_text, new_pos = _rendered_spans(edited, {n for e in edits for n in _nodes_of(e.replacement, cst)})
        if old_text != self.old:
            self.failed = True
            return
        old_at = _Offsets(self.old)

        def rendered(replacement) -> str | None:
            nodes = _nodes_of(replacement, cst)
            if not nodes:
                return ""
            if any(n not in new_pos for n in (nodes[0], nodes[-1])):
                return None
            return new_text[new_pos[nodes[0]][0] : new_pos[nodes[-1]][1]]

        every: list[TextEdit] = []
        self.spans = {}  # finding -> the old spans of its edited nodes
        for i in sorted(self.run.applied):
            placed = sorted(((*old_pos[e.node], e) for e in self.run.edits[i]), key=lambda t: (t[0], -t[1]))
            mine, reach = [], -1
            for start, end, e in placed:
                if start < reach:
                    continue  # inside an edit of the same fix: the outer one is what was written
                text = rendered(e.replacement)
                if text is None:
                    break
                mine.append(TextEdit(start, end, text))
                reach = max(reach, end)
            else:
                # Each replacement shrunk to what differs (a call's `()`, not the whole call).
                self.edits[i] = tuple(_within(self.old, e) for e in mine if self.old[e.start : e.end] != e.new)
                self.spans[i] = [(e.start, e.end) for e in mine]
                self.top_level[i] = any(isinstance(ctx.parent(e.node), cst.Module) for e in self.run.edits[i])
                every += mine
                continue
            self.failed = True  # a replacement not found again: the run cannot be read off
            return
        if apply_text_edits(self.old, every) != new_text:
            self.failed = True
            return
        self._keys(cst, old_at)

    def _keys(self, cst, old_at) -> None:
        """Each finding's import change alone: the imports it adds, those it removes."""
        requests = self.run.requests
        wanted = {(m, n) for i in self.edits for m, n in requests[i].remove_if_unused}
        uses = _ImportUses(self.run.context, old_at, wanted) if wanted else None
        for i in list(self.edits):
            request, removes = requests[i], []
            for module, name in dict.fromkeys(request.remove_if_unused):
                bound, found = uses.of(module, name)
                if not bound:
                    continue  # no such import: nothing to remove
                if any(_uses_name(r, bound) for e in self.run.edits[i] for r in _nodes_of(e.replacement, cst)):
                    self.unsure.add(i)  # its fix writes a use of it again: judge it alone
                    del self.edits[i]
                    break
                if all(any(s <= at < end for s, end in self.spans[i]) for at in found):
                    removes.append((module, name))  # its fix holds every use: alone, it removes it
            else:
                key = (tuple(dict.fromkeys(request.add)), tuple(removes))
                if key != ((), ()):
                    self.import_key[i] = key


class _ImportUses:
    """Where each import that fixes ask to remove is used (scope analysis of the old module)."""

    def __init__(self, ctx, old_at: _Offsets, wanted: set[tuple[str, str | None]]):
        import libcst as cst
        from libcst.helpers import get_full_name_for_node
        from libcst.metadata import PositionProvider, ScopeProvider

        scopes = ctx.wrapper.resolve(ScopeProvider)
        positions = ctx.wrapper.resolve(PositionProvider)
        self.found: dict[tuple[str, str | None], tuple[set[str], list[int]]] = {w: (set(), []) for w in wanted}
        for node in list(positions):
            if isinstance(node, cst.Import):
                pairs = [((get_full_name_for_node(a.name), None), a) for a in node.names]
            elif isinstance(node, cst.ImportFrom) and not node.relative and node.module is not None and not isinstance(node.names, cst.ImportStar):
                module = get_full_name_for_node(node.module)
                pairs = [((module, get_full_name_for_node(a.name)), a) for a in node.names]
            else:
                continue
            scope = scopes.get(node)
            for key, alias in pairs:
                if key not in self.found or scope is None:
                    continue
                bound = alias.evaluated_alias or alias.evaluated_name
                names, uses = self.found[key]
                names.add(bound.split(".")[0])
                for assignment in scope.assignments[bound]:
                    if getattr(assignment, "node", None) is node:
                        for access in assignment.references:
                            where = positions.get(access.node)
                            uses.append(old_at.offset(where.start.line, where.start.column) if where else -1)

    def of(self, module: str, name: str | None) -> tuple[set[str], list[int]]:
        return self.found.get((module, name), (set(), []))


def _nodes_of(replacement, cst) -> list:
    if isinstance(replacement, cst.CSTNode):
        return [replacement]
    if isinstance(replacement, cst.FlattenSentinel):
        return list(replacement.nodes)
    return []


def _uses_name(node, bound: set[str]) -> bool:
    import libcst as cst

    found = []

    class _Find(cst.CSTVisitor):
        def visit_Name(self, name):
            if name.value in bound:
                found.append(name)

    node.visit(_Find())
    return bool(found)


def _rendered_spans(module, targets: set) -> tuple[str, dict]:
    """``module``'s code, and where the code of each of ``targets`` lies in it: the
    (start, end) offsets of what the node's own code generation writes (its leading comment
    and blank lines, indentation and line break included). One code generation, no metadata."""
    from libcst._nodes.internal import CodegenState

    opened: dict = {}
    closed: dict = {}

    class _Recording(CodegenState):
        def before_codegen(self, node):
            if node in targets:
                opened[node] = len(self.tokens)

        def after_codegen(self, node):
            if node in opened:
                closed[node] = (opened.pop(node), len(self.tokens))

    state = _Recording(default_indent=module.default_indent, default_newline=module.default_newline)
    module._codegen(state)
    at = [0]
    for token in state.tokens:
        at.append(at[-1] + len(token))
    last = len(state.tokens)  # a token taken back at the end (the file's last line break)
    return "".join(state.tokens), {n: (at[min(s, last)], at[min(e, last)]) for n, (s, e) in closed.items()}


class _Offsets:
    """LibCST (line, column) positions as offsets into a text."""

    def __init__(self, text: str):
        self.size = len(text)
        self.starts = [0] + [m.end() for m in _LINE_END.finditer(text)]

    def offset(self, line: int, col: int) -> int:
        if line - 1 >= len(self.starts):
            return self.size
        return min(self.starts[line - 1] + col, self.size)

