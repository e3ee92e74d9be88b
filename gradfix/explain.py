"""A rule's documentation as Markdown: ``gradfix explain``, the language server's hover and
the generated ``docs/rules/*.md`` pages all render it from here."""

from __future__ import annotations

import re

from gradfix.rule import Rule

#: The article the rules' docs cite by section (§3.2 ...).
ARTICLE = (
    "“【避坑指南】从 'grad_fn' 缺失到精准控制：PyTorch梯度计算实战解析” "
    "(“A pitfall guide: from a missing grad_fn to precise control, PyTorch gradient computation in "
    "practice”), a Chinese blog article on PyTorch grad control; several of its claims are wrong, "
    "and the rules follow what torch does, not the article"
)

# Docs name the tests that pin a PyTorch fact (`tests/facts/test_gf203_facts.py`); they are in
# the source repository, not in an installed package.
_TEST_PATH = re.compile(r"`?(tests/[\w/.-]+\.py)`?")


def find_rule(code_or_name: str) -> type[Rule] | None:
    """The rule with this code (any case) or name (``context-manager-not-called``), or None."""
    from gradfix.rules import all_rules

    wanted = code_or_name.strip().lower().replace("_", "-")
    return next((r for r in all_rules() if wanted in (r.code.lower(), r.name)), None)


def explain_text(rule: type[Rule]) -> str:
    safety = rule.fix_safety.value if rule.fix_safety else "none (diagnostic only)"
    fix = f"Fix: {safety}" + (f" ({rule.fix_title})" if rule.fix_title else "")
    options = "".join(f"\n- `{o.name}`: {' | '.join(o.choices)} (default `{o.default}`) {o.help}" for o in rule.options)
    doc = _TEST_PATH.sub(r"`\1` (in the gradfix source repository)", rule.doc())
    text = (
        f"# {rule.code} {rule.name}\n\n{rule.summary}.\n\n{fix}. "
        f"On by default: {'yes' if rule.default_enabled else 'no'}.\n\n{doc}\n"
        + (f"\n## Options\n{options}\n" if options else "")
    )
    if "§" in doc:
        text += f"\n## Source\n\n§ numbers refer to the sections of {ARTICLE}.\n"
    return text
