"""A rule's triggers are only a pre-filter: a file they turn away must be one on which the rule
has nothing to report. Checked on every example of every rule, the golden files, the article's
examples and the shipped fixtures: every rule run on every file (triggers ignored) finds exactly
what the run with triggers finds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gradfix import Settings, check
from gradfix.rule import EVAL_SWITCH, attribute
from gradfix.rules import RuleEntry, all_rules, rule_entries

ROOT = Path(__file__).parents[2]
EVERY_RULE = Settings(select=tuple(r.code for r in all_rules()))


def _corpus():
    for rule in all_rules():
        for kind in ("VALID", "INVALID"):
            for i, example in enumerate(getattr(rule, kind)):
                yield pytest.param(example.code, id=f"{rule.code}-{kind.lower()}-{i}")
    for folder, pattern in (("tests/golden", "*/*.in.py"), ("tests/article", "*.py"), ("fixtures", "*.py")):
        for path in sorted((ROOT / folder).glob(pattern)):
            yield pytest.param(path.read_text(encoding="utf-8"), id=str(path.relative_to(ROOT)))


def _found(source: str) -> list[tuple]:
    return [(f.code, f.span, f.message, f.fix) for f in check(source, settings=EVERY_RULE)]


@pytest.mark.parametrize("source", list(_corpus()))
def test_triggers_never_hide_a_finding(source, monkeypatch):
    filtered = _found(source)
    monkeypatch.setattr(RuleEntry, "admits", lambda self, text, found: True)
    assert _found(source) == filtered


def test_every_trigger_is_a_valid_expression():
    for entry in rule_entries():
        assert entry.triggers, f"{entry.code} runs on every file"
        for pattern in (*entry.triggers, *(p for group in entry.requires for p in group)):
            assert pattern and re.compile(pattern).search("") is None, f"{entry.code}: {pattern!r} matches any text"


@pytest.mark.parametrize(
    "text, hit",
    [
        ("model.eval()", True),
        ("model . eval ( )", True),
        ("(model\n    .eval())", True),
        ("model.\\\n    eval()", True),
        ("model.train(False)", True),
        ("model.train( mode = False )", True),
        ("model.train()", False),
        ("model.train(mode)", False),
        ("model.evaluate(x)", False),
        ("eval(code)", False),
    ],
)
def test_an_eval_switch_is_found_however_it_is_spaced(text, hit):
    assert any(re.search(p, text) for p in EVAL_SWITCH) is hit


def test_a_data_write_is_found_however_it_is_spaced():
    gf304 = next(e for e in rule_entries() if e.code == "GF304")
    writes = ["p.data.add_(g)", "p.data [0] = 1", "p.data += g", "p .data\n    .mul_(2)", "torch.add(a, b, out=p.data)", "p.data.clamp_(0, 1)"]
    reads = ["x = p.data.clone()", "print(loss.data)", "from pkg.data import loader", "self.dataset.sort()"]
    for text in writes:
        assert gf304.admits(text, {}), text
    for text in reads:
        assert not gf304.admits(text, {}), text
    assert re.search(attribute("data", r"\["), "loss.data [0]")
