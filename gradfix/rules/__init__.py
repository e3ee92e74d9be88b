"""The rule registry: every module in this package defines one :class:`~gradfix.rule.Rule`.

Rules are discovered, not listed, so adding a rule is adding one file (then run
``python scripts/gen_docs.py``, which also writes :mod:`gradfix.rules.index`: what a run needs to
choose the rules of a file, so that a run imports only the rule modules a file triggers).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass
from functools import lru_cache

from gradfix.rule import Rule


@lru_cache(maxsize=None)
def all_rules() -> tuple[type[Rule], ...]:
    """Every rule class, sorted by code."""
    found: dict[str, type[Rule]] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name == "index":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Rule) and value.__module__ == module.__name__:
                if value.code in found:
                    raise RuntimeError(f"two rules claim {value.code}: {found[value.code]} and {value}")
                found[value.code] = value
    if not found:
        raise RuntimeError("no gradfix rules were found")
    return tuple(found[c] for c in sorted(found))


def rule_by_code(code: str) -> type[Rule] | None:
    return next((r for r in all_rules() if r.code == code.upper()), None)


@dataclass(frozen=True)
class RuleEntry:
    """A rule as the run chooses it, before its module is imported."""

    code: str
    module: str  # under gradfix.rules
    triggers: tuple[str, ...]
    requires: tuple[tuple[str, ...], ...]
    default_enabled: bool
    uses_project: bool

    def load(self) -> type[Rule]:
        return _load(self.module, self.code)

    def admits(self, text: str, found: dict[str, bool]) -> bool:
        """Whether ``text`` holds what the rule needs to fire (:attr:`Rule.triggers`);
        ``found`` keeps each expression's answer for the other rules of the file."""
        return all(any(_search(text, p, found) for p in group) for group in (self.triggers, *self.requires) if group)


_COMPILED: dict[str, re.Pattern | None] = {}  # None: a plain word, found faster with `in`
_PLAIN = re.compile(r"\w+")


def _search(text: str, pattern: str, found: dict[str, bool]) -> bool:
    hit = found.get(pattern)
    if hit is None:
        try:
            compiled = _COMPILED[pattern]
        except KeyError:
            compiled = _COMPILED[pattern] = None if _PLAIN.fullmatch(pattern) else re.compile(pattern)
        hit = found[pattern] = pattern in text if compiled is None else compiled.search(text) is not None
    return hit


@lru_cache(maxsize=None)
def _load(module: str, code: str) -> type[Rule]:
    found = importlib.import_module(f"{__name__}.{module}")
    return next(v for v in vars(found).values() if isinstance(v, type) and issubclass(v, Rule) and getattr(v, "code", None) == code)


def rule_entries() -> tuple[RuleEntry, ...]:
    """Every rule, sorted by code, without importing any rule module."""
    from gradfix.rules.index import ENTRIES

    return ENTRIES


def entry_of(rule: type[Rule]) -> RuleEntry:
    """What :mod:`gradfix.rules.index` must say of ``rule``."""
    module = rule.__module__.rsplit(".", 1)[1]
    requires = tuple(tuple(group) for group in rule.requires)
    return RuleEntry(rule.code, module, tuple(rule.triggers), requires, rule.default_enabled, rule.uses_project)
