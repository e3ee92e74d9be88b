"""The library API validates its settings like the CLI does, and says what a Span counts."""

from __future__ import annotations

import pytest

import gradfix
from gradfix import Settings
from gradfix.config import ConfigError
from gradfix.rules import all_rules

BUGGY = "import torch\nwith torch.no_grad:\n    pass\n"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"select": "GF101"}, "expected a tuple of rule codes"),  # a string is not a tuple of codes
        ({"ignore": "GF1"}, "expected a tuple of rule codes"),
        ({"select": ("GF999",)}, "unknown rule code or prefix 'GF999'"),
        ({"extend_select": ("XX1",)}, "unknown rule code or prefix 'XX1'"),
        ({"rule_options": {"GF202": {"style": "inline"}}}, "'inline' is not one of 'function', 'block'"),
        ({"rule_options": {"GF202": {"colour": "x"}}}, "unknown option 'colour'"),
        ({"rule_options": {"GF999": {}}}, "unknown rule 'GF999'"),
        ({"unsafe_fixes": "yes"}, "expected True or False"),
    ],
)
def test_bad_settings_raise_a_clear_value_error(kwargs, message):
    with pytest.raises(ConfigError, match="Settings") as info:
        Settings(**kwargs)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


def test_all_and_lists_work_in_the_library():
    every = tuple(r.code for r in all_rules())
    assert Settings(select=("ALL",)).select == every
    assert Settings(select=["gf101"]).select == ("GF101",)  # a list is fine, codes normalised
    assert gradfix.check(BUGGY, settings=Settings(ignore=("ALL",))) == []
    off_by_default = [r.code for r in all_rules() if not r.default_enabled]
    source = "import torch\nwith torch.set_grad_enabled(False):\n    y = 1\n"
    assert {f.code for f in gradfix.check(source, settings=Settings(select=("ALL",)))} >= {"GF205"} & set(off_by_default)


def test_span_columns_are_zero_based_and_the_cli_adds_one():
    (finding,) = gradfix.check(BUGGY, settings=Settings(select=("GF101",)))
    assert (finding.span.line, finding.span.col) == (2, 5)  # `torch` starts at the 6th character
    from gradfix.model import FixOutcome
    from gradfix.report import finding_line

    assert finding_line("t.py", FixOutcome(finding), False).startswith("t.py:2:6: GF101")
