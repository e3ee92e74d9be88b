"""Plain data types shared by every layer: spans, findings, edits, settings, results."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class FixSafety(str, enum.Enum):
    """How much a fix can be trusted (see rules.md, "Fix safety")."""

    SAFE = "safe"
    UNSAFE = "unsafe"


@dataclass(frozen=True, order=True)
class Span:
    """A source range: 1-based lines, 0-based character columns, as Python's ``ast`` counts
    them. Every output (text, JSON, SARIF, github, the language server) shows 1-based columns:
    ``col + 1``."""

    line: int
    col: int
    end_line: int
    end_col: int


@dataclass(frozen=True)
class Finding:
    """One reported problem.

    ``fix`` is the safety of the fix the rule can build (None: diagnostic only).
    ``anchors`` are extra lines whose suppression comments also silence it (the ``with`` or
    ``def`` line that opens the flagged construct). ``data`` is the rule's own payload,
    handed back to its ``fix``; it must be picklable. ``cell`` is set for notebook findings.
    ``fix_title`` says in a few words what the fix does (Ruff's fix title); None without a fix.
    ``no_fix`` says why a rule that fixes this kind of finding builds no fix for this one (shown
    with ``--show-fixes`` and in JSON, never in the message); None where it has a fix.
    """

    code: str
    name: str
    message: str
    span: Span
    fix: FixSafety | None = None
    anchors: tuple[int, ...] = ()
    data: Any = None
    cell: int | None = None  # 1-based notebook cell (the span is then relative to the cell)
    fix_title: str | None = None
    no_fix: str | None = None

    @property
    def line(self) -> int:
        return self.span.line


@dataclass(frozen=True)
class Settings:
    """What to check and fix. ``select``/``ignore``/``extend_select`` hold codes or prefixes
    (``"ALL"``: every rule, off-by-default ones included); ``rule_options`` maps a code to its
    options (``{"GF202": {"style": "block"}}``).

    Validated like the command line and pyproject.toml: an unknown code, a string where a
    sequence of codes belongs, or a bad option value raises
    :class:`gradfix.config.ConfigError` (a ``ValueError``).
    """

    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    unsafe_fixes: bool = False
    rule_options: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        defaults = (self.select, self.ignore, self.extend_select, self.rule_options) == ((), (), (), {})
        if defaults and isinstance(self.unsafe_fixes, bool):
            return  # nothing to validate: `Settings()` need not import the rules
        from gradfix import config
        from gradfix.config import ConfigError, validate_codes, validate_rule_options

        every = tuple(r.code for r in config.rule_entries())
        for name in ("select", "ignore", "extend_select"):
            value = getattr(self, name)
            if isinstance(value, str) or not isinstance(value, (tuple, list, set, frozenset)):
                raise ConfigError(
                    f"Settings({name}=...): expected a tuple of rule codes, e.g. {name}=('GF1',), got {value!r}"
                )
            codes = validate_codes(tuple(value), f"Settings({name}=...)")
            object.__setattr__(self, name, every if "ALL" in codes else codes)
        if not isinstance(self.unsafe_fixes, bool):
            raise ConfigError(f"Settings(unsafe_fixes=...): expected True or False, got {self.unsafe_fixes!r}")
        if not isinstance(self.rule_options, dict):
            raise ConfigError(f"Settings(rule_options=...): expected a dict of code -> options, got {self.rule_options!r}")
        object.__setattr__(self, "rule_options", validate_rule_options(self.rule_options, "Settings(rule_options=...)"))

    def options_for(self, code: str) -> dict[str, Any]:
        return self.rule_options.get(code, {})


@dataclass(frozen=True)
class TextEdit:
    """Replace ``text[start:end]`` of a file's decoded text with ``new`` (offsets in characters)."""

    start: int
    end: int
    new: str


def apply_text_edits(text: str, edits) -> str:
    """``text`` with non-overlapping :class:`TextEdit` replacements applied."""
    out, at = [], 0
    for edit in sorted(edits, key=lambda e: (e.start, e.end)):
        out += [text[at : edit.start], edit.new]
        at = edit.end
    return "".join(out) + text[at:]


@dataclass
class FixOutcome:
    """A finding and whether its fix went into the new source.

    ``edit`` is the finding's own fix as text replacements in the original source (recorded
    once per file when asked for, e.g. for SARIF or interactive review); None: not computed or
    no fix. ``refused`` says why a fix the rule declares cannot be made (None: not refused).
    """

    finding: Finding
    applied: bool = False
    edit: tuple[TextEdit, ...] | None = None
    #: Why the finding's fix cannot be made here, once the fixer has tried it (it changes
    #: nothing, it could not be built, it would move code across notebook cells): the finding
    #: is then not reported as fixable.
    refused: str | None = None


@dataclass
class FileResult:
    """Everything gradfix learned about one file."""

    path: str
    findings: list[FixOutcome] = field(default_factory=list)
    old_source: bytes | None = None
    new_source: bytes | None = None  # set only when a fix changed the file
    error: str | None = None  # syntax error / unreadable: the file is left alone
    error_kind: str | None = None  # "syntax", "io", "internal"
    notes: list[str] = field(default_factory=list)  # internal errors, skipped fixes
    read_as: tuple | None = None  # (real path, st_dev, st_ino) of the file read: all a write may replace
    # Other files' contents the result depends on (the project index's questions about classes
    # defined there): absolute path -> sha1 of the bytes read. The cache checks them.
    project_reads: dict[str, str] | None = None

    @property
    def changed(self) -> bool:
        return self.new_source is not None and self.new_source != self.old_source


@dataclass(frozen=True)
class Job:
    """One file to process, with its own settings (config is per directory)."""

    path: str
    settings: Settings
    display: str  # the path as shown to the user
    project: Any = None  # the run's ProjectIndex (gradfix/analysis/project.py), shared by every job
