"""The base every rule builds on: metadata, docs, examples, ``check`` and ``fix``.

A rule module under ``gradfix/rules/`` defines one subclass of :class:`Rule`. Its docstring
holds the Ruff-style doc sections; ``VALID``/``INVALID`` hold the examples that the generic
test runs; ``check`` reads :class:`~gradfix.facts.FileFacts` and yields findings; ``fix``
builds LibCST edits for one finding. The engine knows nothing else about any rule.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Iterable

from gradfix.model import Finding, FixSafety, Span

if TYPE_CHECKING:
    from gradfix.facts import FileFacts
    from gradfix.fixer import Edit, FixContext

DOC_SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead", "Fix safety")


# Text a rule's ``triggers``/``requires`` name (regular expressions; see Rule.triggers).
#: Every grad-mode API (each canonical name of gradfix.facts ends in one of these).
GRAD_APIS = ("no_grad", "enable_grad", "set_grad_enabled", "inference_mode")
#: The APIs that can disable grad: a grad-disabled region or toggle names one of them.
GRAD_DISABLING = ("no_grad", "set_grad_enabled", "inference_mode")
GAP = r"[\s\\]*"  # what Python allows around a `.` or before `(`: spaces, line breaks, `\`


def attribute(name: str, then: str = "") -> str:
    r"""A regular expression for ``.name`` (however spaced) followed by ``then``: ``.eval()`` is
    ``attribute("eval", r"\(")``."""
    return rf"\.{GAP}{name}\b" + (GAP + then if then else "")


#: ``.eval()`` (no arguments: nn.Module's).
EVAL_CALL = attribute("eval", rf"\({GAP}\)")
#: A switch to eval mode: ``.eval()``, ``.train(False)``, ``.train(mode=False)``.
EVAL_SWITCH = (EVAL_CALL, attribute("train", rf"\({GAP}(?:mode{GAP}={GAP})?False"))


@dataclass(frozen=True)
class Option:
    """A per-rule option (``[tool.gradfix.rules.GF202] style = "block"``)."""

    name: str
    choices: tuple[str, ...]
    help: str = ""

    @property
    def default(self) -> str:
        return self.choices[0]


def example_source(text: str) -> str:
    """The source an example stands for, from how a rule file writes it.

    Examples are written as triple-quoted blocks indented with the code around them (opening
    quotes, newline, the lines, closing quotes on their own line): one leading newline is
    dropped and the common indentation removed (``textwrap.dedent``, which also empties lines
    holding only spaces or tabs). An escaped string that starts at column 0, has no leading
    newline and no whitespace-only line comes back unchanged: that is how examples whose exact
    bytes matter (CRLF, tabs) are written.
    """
    if text.startswith("\n"):
        text = text[1:]
    return textwrap.dedent(text)


@dataclass(frozen=True)
class Valid:
    """Code on which the rule must stay silent (written as :func:`example_source` reads it)."""

    code: str
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "code", example_source(self.code))


@dataclass(frozen=True)
class Invalid:
    """Code on which the rule must fire.

    ``expected`` is the source after applying this rule's fixes (unsafe included), or None
    when the rule reports without a fix. ``count`` is how many findings it must report.
    ``code`` and ``expected`` are written as :func:`example_source` reads them.
    """

    code: str
    expected: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    count: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "code", example_source(self.code))
        if self.expected is not None:
            object.__setattr__(self, "expected", example_source(self.expected))


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]
    summary: ClassVar[str]
    #: Safety of the fix this rule builds; None for diagnostic-only rules.
    fix_safety: ClassVar[FixSafety | None] = None
    default_enabled: ClassVar[bool] = True
    #: What the file's text must hold for the rule to be able to fire at all (a cheap pre-filter,
    #: so that most files of a big tree are never walked): regular expressions, searched once
    #: per file and shared by every rule. One of ``triggers`` must match and, for each group of
    #: ``requires``, one expression of that group too. A file that fails is not analysed for
    #: the rule, so each clause must be a necessary condition of a finding (tests/rules checks
    #: it on every example and fixture). Empty triggers: always run. A plain word is looked for
    #: with `in`, several times faster than an expression: name words in ``triggers`` and
    #: the expressions that narrow them down in ``requires``.
    triggers: ClassVar[tuple[str, ...]] = ()
    requires: ClassVar[tuple[tuple[str, ...], ...]] = ()
    options: ClassVar[tuple[Option, ...]] = ()
    #: Whether the rule asks the project index (classes of other files): the CLI builds the
    #: index only when a selected rule does.
    uses_project: ClassVar[bool] = False
    #: What the fix does, in a few words ("Add `()`"); a finding may give its own.
    fix_title: ClassVar[str | None] = None
    #: What `gradfix verify` must observe when fixture models run before/after the fix (see
    #: gradfix/verify/contract.py). None: derived from fix_safety (safe: every observable equal).
    contract: ClassVar[Any] = None
    VALID: ClassVar[list[Valid]] = []
    INVALID: ClassVar[list[Invalid]] = []

    def __init__(self, options: dict[str, Any] | None = None, enabled: Iterable[str] = ()):
        self.opts = {o.name: o.default for o in self.options}
        self.opts.update(options or {})
        #: Codes of every rule enabled in this run (this one included).
        self.enabled = frozenset(enabled)

    def defers_to(self, code: str) -> bool:
        """True when rule ``code`` is enabled, so that a case it covers is left to it.

        A rule that leaves a shape to another rule must ask this: with the other rule
        ignored, the shape is this rule's to report.
        """
        return code in self.enabled

    # -- to implement ---------------------------------------------------------------------
    def check(self, facts: FileFacts) -> Iterable[Finding]:
        raise NotImplementedError

    def fix(self, finding: Finding, ctx: FixContext) -> list[Edit] | None:
        """LibCST edits for ``finding`` (keyed on original nodes), or None if it cannot."""
        return None

    # -- helpers for subclasses -------------------------------------------------------------
    def report(
        self,
        facts: FileFacts,
        node: ast.AST | Span,
        message: str,
        *,
        fix: FixSafety | None | bool = True,
        anchors: Iterable[ast.AST | int] = (),
        data: Any = None,
        fix_title: str | None = None,
        no_fix: str | None = None,
    ) -> Finding:
        """A finding at ``node``; ``fix=True`` means "this rule's declared fix safety".
        ``no_fix`` (why this finding gets no fix) implies ``fix=False``; the message then says
        only what is wrong."""
        span = node if isinstance(node, Span) else facts.span(node)
        safety = None if no_fix or fix is False else self.fix_safety if fix is True else fix
        lines = tuple(a if isinstance(a, int) else a.lineno for a in anchors)
        title = (fix_title or self.fix_title) if safety is not None else None
        return Finding(self.code, self.name, message, span, safety, lines, data, fix_title=title, no_fix=no_fix)

    # -- metadata ---------------------------------------------------------------------------
    @classmethod
    def doc(cls) -> str:
        return inspect.cleandoc(cls.__doc__ or "")

    @classmethod
    def doc_sections(cls) -> dict[str, str]:
        """The docstring's ``## Heading`` sections, by heading."""
        sections: dict[str, list[str]] = {}
        current = None
        for line in cls.doc().splitlines():
            if line.startswith("## "):
                current = line[3:].strip()
                sections[current] = []
            elif current is not None:
                sections[current].append(line)
        return {k: "\n".join(v).strip() for k, v in sections.items()}

    @classmethod
    def option(cls, name: str) -> Option | None:
        return next((o for o in cls.options if o.name == name), None)
