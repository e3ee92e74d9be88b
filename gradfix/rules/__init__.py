"""The rule registry: every module in this package defines one :class:`~gradfix.rule.Rule`.

Rules are discovered, not listed, so adding a rule is adding one file.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from gradfix.rule import Rule


@lru_cache(maxsize=None)
def all_rules() -> tuple[type[Rule], ...]:
    """Every rule class, sorted by code."""
    found: dict[str, type[Rule]] = {}
    for info in pkgutil.iter_modules(__path__):
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
