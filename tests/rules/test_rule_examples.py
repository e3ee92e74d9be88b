"""Every rule's VALID/INVALID examples, run generically (fails loudly if no rule is found)."""

from __future__ import annotations

import pytest

from gradfix import Settings, check, fix
from gradfix.rule import DOC_SECTIONS
from gradfix.rules import all_rules

RULES = all_rules()


def _settings(rule, options, unsafe=True) -> Settings:
    return Settings(select=(rule.code,), unsafe_fixes=unsafe, rule_options={rule.code: dict(options)})


def test_rules_were_collected():
    assert len(RULES) >= 1
    assert len({r.code for r in RULES}) == len(RULES)


def _cases(kind):
    for rule in RULES:
        for i, example in enumerate(getattr(rule, kind)):
            yield pytest.param(rule, example, id=f"{rule.code}-{kind.lower()}-{i}")


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_rule_has_docs_and_examples(rule):
    sections = rule.doc_sections()
    for name in DOC_SECTIONS:
        assert sections.get(name), f"{rule.code} lacks the doc section {name!r}"
    assert rule.VALID, f"{rule.code} has no VALID examples"
    assert rule.INVALID, f"{rule.code} has no INVALID examples"
    assert rule.code.startswith("GF") and rule.name and rule.summary
    # A trigger is a substring a file must hold for the rule to run: "" would match every file.
    assert all(isinstance(t, str) and t for t in rule.triggers), f"{rule.code}: an empty trigger"


@pytest.mark.parametrize("rule, example", list(_cases("VALID")))
def test_valid_example_is_silent(rule, example):
    findings = [f for f in check(example.code, settings=_settings(rule, example.options)) if f.code == rule.code]
    assert findings == [], f"{rule.code} fired on VALID code:\n{example.code}"


@pytest.mark.parametrize("rule, example", list(_cases("INVALID")))
def test_invalid_example_fires_and_fixes(rule, example):
    settings = _settings(rule, example.options)
    findings = [f for f in check(example.code, settings=settings) if f.code == rule.code]
    assert len(findings) == example.count, f"{rule.code}: expected {example.count} finding(s), got {findings}"
    fixed = fix(example.code, settings=settings)
    if example.expected is None:
        assert fixed == example.code, f"{rule.code} rewrote code it should only report"
    else:
        assert fixed == example.expected
        compile(fixed, "<fixed>", "exec")
        assert fix(fixed, settings=settings) == fixed, "fix is not idempotent"
    # The safe subset alone must never change code when the fix is unsafe.
    if all(f.fix is not None and f.fix.value == "unsafe" for f in findings):
        assert fix(example.code, settings=_settings(rule, example.options, unsafe=False)) == example.code


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_every_example_is_a_program_of_its_own(rule):
    # An example emptied or repeated tests nothing (scripts/mutate.py's emptied strings survived
    # every other test): each one is non-empty Python that compiles, and no two are the same
    # (the same code under other options is another example).
    examples = [(e.code, sorted(e.options.items())) for kind in ("VALID", "INVALID") for e in getattr(rule, kind)]
    for code, _ in examples:
        assert code.strip(), f"{rule.code} has an empty example"
        compile(code, f"<{rule.code} example>", "exec")
    assert len({repr(e) for e in examples}) == len(examples), f"{rule.code} repeats an example"
    for example in rule.INVALID:
        if example.expected is not None:
            assert example.expected != example.code, f"{rule.code}: an INVALID example's fix changes nothing"


@pytest.mark.parametrize("code", ["GF101", "GF204"])
def test_region_rules_trigger_on_every_grad_mode_api(code):
    """GF101 and GF204 read facts.regions, which know the four grad-mode APIs: a file that
    names any one of them (however it imports it) must reach the rule."""
    from gradfix.facts import GRAD_CONTEXT_APIS

    rule = next(r for r in RULES if r.code == code)
    for api in GRAD_CONTEXT_APIS:
        assert any(t in api.rsplit(".", 1)[1] for t in rule.triggers), f"{code} does not trigger on {api}"
    assert not any(t in "x.requires_grad = True  # gradient" for t in rule.triggers)
