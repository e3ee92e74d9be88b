"""The rule-agnostic pipeline: source -> facts -> findings -> (fixes) -> new source.

Detection runs on the stdlib ``ast`` (cheap); LibCST parses a file only when a fix for it is
wanted. This module is the library API behind the CLI; tests call it directly.
"""

from __future__ import annotations

import ast
import io
import re
import symtable
import tokenize
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

from gradfix import formfeed
from gradfix.facts import build_facts
from gradfix.hints import suppression_problems, syntax_hint, unknown_suppression_codes
from gradfix.model import FileResult, Finding, FixOutcome, FixSafety, Job, Settings
from gradfix.rule import Rule
from gradfix.rules import RuleEntry, rule_entries

if TYPE_CHECKING:  # the fixer (and LibCST with it) is imported only when a fix is wanted
    from gradfix.fixer import FixContext, FixRun

_IGNORE = re.compile(r"#\s*gradfix:\s*ignore(?:\[(?P<codes>[^\]]*)\])?", re.IGNORECASE)
_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)


class SourceError(Exception):
    """The source cannot be analysed (syntax error, undecodable bytes)."""

    def __init__(self, message: str, line: int = 1, col: int = 1):
        super().__init__(message)
        self.message, self.line, self.col = message, line, col


def _matches(code: str, patterns: Iterable[str]) -> bool:
    return any(code.startswith(p.strip().upper()) for p in patterns if p.strip())


def selected_rules(settings: Settings) -> list[RuleEntry]:
    """Rules that ``settings`` turns on (their entries: ``.load()`` imports the rule). Off-by-default
    rules need their full code."""
    chosen = []
    for rule in rule_entries():
        if settings.select:
            on = _matches(rule.code, settings.select) and (
                rule.default_enabled or rule.code in {s.upper() for s in settings.select}
            )
        else:
            on = rule.default_enabled
        if rule.code in {s.upper() for s in settings.extend_select} or (
            rule.default_enabled and _matches(rule.code, settings.extend_select)
        ):
            on = True
        if _matches(rule.code, settings.ignore):
            on = False
        if on:
            chosen.append(rule)
    return chosen


def decode_source(source: bytes | str) -> str:
    """Text of a file as Python reads it (PEP 263 coding line, BOM)."""
    if isinstance(source, str):
        return source
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
        return source.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as exc:
        raise SourceError(f"cannot decode: {exc}") from None


def parse(source: bytes | str, path: str) -> ast.Module:
    try:
        return ast.parse(source, filename=path)
    except SyntaxError as exc:
        hint = syntax_hint(source, exc.lineno)
        raise SourceError(f"syntax error: {exc.msg}{hint}", exc.lineno or 1, exc.offset or 1) from None
    except ValueError as exc:  # e.g. null bytes
        raise SourceError(f"syntax error: {exc}") from None
    except (RecursionError, MemoryError):  # CPython's parser on very deep nesting
        raise SourceError("file is nested too deeply to analyse") from None


def check_syntax(source: bytes | str, path: str) -> None:
    """Raise the :class:`SourceError` that :func:`parse` would, without building the tree.

    CPython's symbol-table pass parses in C and hands back one object, not a node per token: a
    third cheaper than ``ast.parse`` for the files no rule looks into. It also rejects what only
    the compiler does (a duplicate argument, say); there :func:`parse` decides, so a file is
    reported exactly when ``ast.parse`` fails.
    """
    try:
        symtable.symtable(source, path, "exec")
    except Exception:  # a syntax error, null bytes, nesting too deep
        parse(source, path)


def _suppressed(finding: Finding, lines: Sequence[str]) -> bool:
    for number in {finding.line, *finding.anchors}:
        text = lines[number - 1] if 0 < number <= len(lines) else ""
        if "#" not in text:
            continue
        for match in (_IGNORE.search(text), _NOQA.search(text)):
            if match is None:
                continue
            codes = match.group("codes")
            if codes is None or _matches(finding.code, re.split(r"[\s,]+", codes)):
                return True
    return False


def check(source: bytes | str, path: str = "<string>", settings: Settings = Settings(), project=None) -> list[Finding]:
    """Findings in ``source``, sorted by position, suppression comments honoured.

    ``project`` is the run's :class:`~gradfix.analysis.project.ProjectIndex` (classes defined
    in other files of the tree), or None to judge the file on its own.
    Raises :class:`SourceError` when the source does not parse.
    """
    text = decode_source(source)
    chosen = _selected_for(settings)
    found: dict[str, bool] = {}  # each trigger expression is searched for once (rules share them)
    triggered = [r for r in chosen if r.admits(text, found)]
    if not triggered:  # no tree and no facts for a file no rule's trigger admits
        check_syntax(source, path)  # but a syntax error is reported wherever it is
        return []
    tree = parse(source, path)
    enabled = [r.code for r in chosen]
    rules = [r.load()(settings.options_for(r.code), enabled) for r in triggered]
    facts = build_facts(text, path, tree, project)
    findings: list[Finding] = []
    try:
        for rule in rules:
            findings.extend(f for f in rule.check(facts) if not _suppressed(f, facts.lines))
    finally:
        facts.release()
    findings.sort(key=lambda f: (f.span.line, f.span.col, f.code))
    return _unfixable_here(source, text, _dedupe(findings))


# Indentation with a tab after spaces: CPython accepts it where LibCST's tokenizer may not
# ("no matching outer block for dedent"), so only there is LibCST asked before a fix is promised.
_TAB_AFTER_SPACES = re.compile(r"^ +\t", re.M)


def _unfixable_here(source: bytes | str, text: str, findings: list[Finding]) -> list[Finding]:
    """``findings``, with no fix declared when LibCST cannot rewrite the file."""
    if not any(f.fix for f in findings) or not _TAB_AFTER_SPACES.search(text):
        return findings
    from dataclasses import replace

    from gradfix.fixer import unfixable

    why = unfixable(source if isinstance(source, bytes) else source.encode("utf-8"))
    if why is None:
        return findings
    return [replace(f, fix=None, fix_title=None, no_fix=why) if f.fix else f for f in findings]


_last_selection: list = [None, ()]  # (settings, its rules): a run checks many files with one Settings


def _selected_for(settings: Settings) -> list[RuleEntry]:
    if _last_selection[0] is not settings:
        _last_selection[:] = [settings, selected_rules(settings)]
    return _last_selection[1]


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for f in findings:
        key = (f.code, f.span, f.message)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def wants_fix(finding: Finding, settings: Settings) -> bool:
    return finding.fix is FixSafety.SAFE or (finding.fix is FixSafety.UNSAFE and settings.unsafe_fixes)


def _builder(settings: Settings):
    instances: dict[str, Rule] = {}

    def build(finding: Finding, ctx: FixContext):
        if finding.code not in instances:
            rule = next(r for r in rule_entries() if r.code == finding.code).load()
            instances[finding.code] = rule(settings.options_for(finding.code), [r.code for r in selected_rules(settings)])
        return instances[finding.code].fix(finding, ctx)

    return build


def fix_findings(source: bytes, findings: Sequence[Finding | None], settings: Settings, path: str = "<string>"):
    """Apply the fixes of ``findings`` that ``settings`` allows (None entries are skipped).

    Returns the FixRun (its ``applied`` indexes refer to ``findings``), or None if no fix is wanted.
    """
    wanted = [f if f is not None and wants_fix(f, settings) else None for f in findings]
    if not any(wanted):
        return None
    from gradfix.fixer import apply_fixes

    return apply_fixes(source, wanted, _builder(settings), path)


def finding_edits(source: bytes, findings: Sequence[Finding], settings: Settings, path: str = "<string>") -> dict[int, tuple]:
    """Each fixable finding's own edit (unsafe ones too) as text replacements in ``source``,
    by index into ``findings``: exactly what its fix alone would change (gradfix.edits reads
    them off a few fix runs per file, however many findings it has). A finding whose fix
    changes nothing has none."""
    from dataclasses import replace

    from gradfix.edits import own_edits

    settings = replace(settings, unsafe_fixes=True)
    wanted = [f if wants_fix(f, settings) else None for f in findings]
    if not any(wanted):
        return {}
    return own_edits(source, wanted, _builder(settings), path)


# A fix can uncover another finding (GF101 makes a `with` a real grad context that GF203 then
# looks into; an overlapped fix waits for the outer one): fix again until nothing changes, so
# that a second `--apply` never changes the file again.
FIX_PASSES = 10


@dataclass
class StableFix:
    """The outcome of fixing a source until a further pass changes nothing."""

    source: bytes
    fixed: list[Finding]  # every finding fixed, in any pass (where it was found)
    first_pass: set[int]  # indexes into the findings given that the first pass fixed
    remaining: list[Finding]  # the findings of the final source
    notes: list[str]
    #: False when FIX_PASSES ran out while fixes still changed the source; True means every
    #: remaining finding whose fix is wanted was tried last and changed nothing.
    settled: bool = True


def fix_until_stable(
    source: bytes, findings: list[Finding], settings: Settings, path: str = "<string>", project=None, admit=None
) -> StableFix:
    """Fix ``source`` until a further pass changes nothing. ``admit(source, findings)``, when
    given, returns the findings each pass may fix (None for the others, e.g. the fixes that a
    notebook cannot take back into its cells)."""
    aside = formfeed.set_aside(source)
    if aside is not None:  # LibCST drops a form feed that starts a line of code: fix without them
        inner_findings = check(aside.stripped, path, settings, project)
        if len(inner_findings) == len(findings):
            inner = _fix_until_stable(aside.stripped, inner_findings, settings, path, project, admit)
            if inner.source == aside.stripped:
                return StableFix(source, [], set(), findings, inner.notes)
            restored = aside.restore(inner.source)
            if _compiles(restored, path) and formfeed.set_aside(restored).stripped == inner.source:
                remaining = check(restored, path, settings, project)
                return StableFix(restored, inner.fixed, inner.first_pass, remaining, inner.notes, inner.settled)
        return StableFix(source, [], set(), findings, ["cannot fix: the form feeds of this file could not be kept; left unchanged"])
    return _fix_until_stable(source, findings, settings, path, project, admit)


def _compiles(source: bytes, path: str) -> bool:
    try:
        parse(source, path)
    except SourceError:
        return False
    return True


def _fix_until_stable(source: bytes, findings: list[Finding], settings: Settings, path: str, project, admit=None) -> StableFix:
    current, fixed, first_pass, notes = source, [], set(), []
    for number in range(FIX_PASSES):
        wanted = list(findings if admit is None else admit(current, findings))
        while True:
            run = fix_findings(current, wanted, settings, path)
            if run is None or run.source == current:
                break
            after = check(run.source, path, settings, project)  # it compiled, so it parses
            futile = _left_in_place(current, wanted, run.source, run.applied, after)
            if not futile:
                break
            # a fix after which its finding is still there is no fix: the pass runs without it
            # (else each pass would apply it again: ten `model.eval()` lines, none of them helping)
            wanted = [None if i in futile else f for i, f in enumerate(wanted)]
        if run is None:
            break
        notes.extend(n for n in run.notes if n not in notes)
        if run.source == current:
            break
        if number == 0:
            first_pass = set(run.applied)
        fixed += [findings[i] for i in sorted(run.applied)]
        current = run.source
        findings = after
    else:
        return StableFix(current, fixed, first_pass, findings, notes, settled=False)
    return StableFix(current, fixed, first_pass, findings, notes)


def _left_in_place(old: bytes, before: list[Finding | None], new: bytes, applied: set[int], after: list[Finding]) -> set[int]:
    """The indexes of ``applied`` (into ``before``, the findings of ``old``) whose finding is
    still there in ``after`` (the findings of ``new``): as many findings of the same rule, at
    the same column of an unchanged line of code, with the same message up to its numbers."""
    from collections import Counter

    def keys(source: bytes, findings) -> list:
        lines = source.splitlines()
        return [
            (f.code, f.cell, f.span.col, _DIGITS.sub("#", f.message), lines[f.span.line - 1].strip() if f.span.line <= len(lines) else b"")
            for f in findings
        ]

    were = keys(old, [f for f in before if f is not None])
    mine = dict(zip((i for i, f in enumerate(before) if f is not None), were))
    counts, remaining = Counter(were), Counter(keys(new, after))
    return {i for i in applied if remaining[mine[i]] >= counts[mine[i]]}


_DIGITS = re.compile(r"\d+")


def fix(source: bytes | str, path: str = "<string>", settings: Settings = Settings(), project=None) -> bytes | str:
    """``source`` with every allowed fix applied (same type as given)."""
    as_bytes = source.encode("utf-8") if isinstance(source, str) else source
    new = fix_until_stable(as_bytes, check(as_bytes, path, settings, project), settings, path, project).source
    return new.decode("utf-8") if isinstance(source, str) else new


def _known_codes() -> tuple[str, ...]:
    return tuple(r.code for r in rule_entries())


def with_project_index(jobs: Sequence[Job], index=None) -> list[Job]:
    """The jobs with one :class:`~gradfix.analysis.project.ProjectIndex` of their files (a
    read and a hash per file; files are parsed only when a rule asks about a class in them),
    when a selected rule asks about other files; ``index``: one already built for them."""
    from dataclasses import replace

    from gradfix.analysis.project import ProjectIndex

    settings = {id(job.settings): job.settings for job in jobs}.values()  # one per folder config
    if not any(rule.uses_project for one in settings for rule in selected_rules(one)):
        return list(jobs)
    if index is None:
        index = ProjectIndex.build(job.path for job in jobs)
    return [replace(job, project=index) for job in jobs]


def process_source(source: bytes, job: Job, want_fixes: bool, want_edits: bool = False) -> FileResult:
    """Findings of one file; with ``want_fixes`` the fixed source too; with ``want_edits`` each
    finding of the file as given carries its own edit (``FixOutcome.edit``)."""
    if job.path.endswith(".ipynb"):
        return _process_notebook(source, job, want_fixes)
    result = FileResult(job.display, old_source=source)
    try:
        findings = check(source, job.display, job.settings, job.project)
    except SourceError as exc:
        result.error, result.error_kind = f"{exc.line}:{exc.col}: {exc.message}", "syntax"
        return result
    result.findings = [FixOutcome(f) for f in findings]
    result.notes.extend(unknown_suppression_codes(source, _known_codes()))
    if (want_fixes or want_edits) and any(f.fix is not None for f in findings):
        from gradfix.fixer import compile_error

        broken = compile_error(source, job.display)
        if broken is not None:  # ast accepts it, Python does not (a late `from __future__` import)
            result.notes.append(f"cannot fix: the file does not compile as it is ({broken}); left unchanged")
            for outcome in result.findings:
                if outcome.finding.fix is not None:
                    outcome.refused = NOT_COMPILING
            return result
    own = {}
    if want_edits and any(f.fix is not None for f in findings):
        own = {id(findings[i]): e for i, e in finding_edits(source, findings, job.settings, job.display).items()}
        for outcome in result.findings:
            outcome.edit = own.get(id(outcome.finding))
            if outcome.finding.fix is not None and outcome.edit is None:
                outcome.refused = NO_CHANGE
    if want_fixes:
        stable = fix_until_stable(source, findings, job.settings, job.display, job.project)
        result.notes.extend(stable.notes)
        if stable.source != source:
            # Fixed findings (where they were found) and what is left in the new source.
            result.new_source = stable.source
            outcomes = [FixOutcome(f, applied=True, edit=own.get(id(f))) for f in stable.fixed]
            outcomes += [FixOutcome(f, edit=own.get(id(f))) for f in stable.remaining]
            result.findings = sorted(outcomes, key=lambda o: (o.finding.span, o.finding.code))
        if stable.settled:  # what is left with a wanted fix was tried last and changed nothing
            for outcome in result.findings:
                if not outcome.applied and wants_fix(outcome.finding, job.settings):
                    outcome.refused = outcome.refused or NO_CHANGE
    return result


#: The reason a finding whose fix was tried is not reported as fixable.
NO_CHANGE = "its fix changes nothing here"
NOT_COMPILING = "the file does not compile as it is"


def _process_notebook(source: bytes, job: Job, want_fixes: bool) -> FileResult:
    from gradfix.notebook import process_notebook

    def check_cells(text: str) -> list[Finding]:
        return check(text, job.display, job.settings, job.project)

    def fix_cells(text: str, findings: list[Finding], admit=None) -> FixRun:
        from gradfix.fixer import FixRun

        stable = fix_until_stable(text.encode("utf-8"), findings, job.settings, job.display, job.project, admit)
        return FixRun(stable.source, stable.first_pass, stable.notes)

    def edits_of(text: str, findings: list[Finding]) -> dict[int, tuple]:
        return finding_edits(text.encode("utf-8"), findings, job.settings, job.display)

    try:
        return process_notebook(
            source,
            job.display,
            check_cells,
            fix_cells,
            want_fixes,
            lambda text: suppression_problems(text, _known_codes()),
            edits_of,
        )
    except SourceError as exc:
        return FileResult(job.display, old_source=source, error=f"{exc.line}:{exc.col}: {exc.message}", error_kind="syntax")
