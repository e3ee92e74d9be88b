"""Fixes that delete code: pins for the mutants the audit of issue 13 found surviving.

Each case is a shape where one wrong index or one dropped condition makes a fix delete a
statement the user wrote; the tests check the statement is still there after ``--apply``.
"""

from __future__ import annotations

import pytest

from gradfix import Settings, check, fix


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from torch.autograd import Variable\nimport torch\nx = Variable(torch.ones(1))\ny = 2\n",
         "import torch\nx = torch.ones(1)\ny = 2\n"),
        ("from torch.autograd import Variable\n\n\nimport torch  # keep\nx = Variable(torch.ones(1))\n",
         "import torch  # keep\nx = torch.ones(1)\n"),
    ],
)
def test_removing_a_first_line_import_keeps_the_next_statement(source, expected):
    # fixer.py: `*module.body[1:]` -> `[2:]` deleted the statement after the removed import.
    assert fix(source, settings=Settings(select=("GF402",), unsafe_fixes=True)) == expected


TOGGLES_SHARING_A_LINE = [
    "    torch.set_grad_enabled(True)\n        y = x * 2\n        torch.set_grad_enabled(False); z = y * 2\n",
    "    torch.set_grad_enabled(True); z = x * 3\n        y = x * 2\n        torch.set_grad_enabled(False)\n",
    "    torch.set_grad_enabled(True)  # on\n        y = x * 2\n        torch.set_grad_enabled(False); z = y * 2  # off\n",
]


@pytest.mark.parametrize("body", TOGGLES_SHARING_A_LINE)
@pytest.mark.parametrize("style", [None, "block", "function"])
def test_gf202_never_removes_a_toggle_that_shares_its_line(body, style):
    # gf202: dropping `_alone_on_its_line` made the fix delete `z = ...` with the toggle.
    source = "import torch\n\n\ndef f(x):\n    with torch.no_grad():\n    " + body + "    return z\n"
    options = {"GF202": {"style": style}} if style else {}
    settings = Settings(select=("GF202",), unsafe_fixes=True, rule_options=options)
    (finding,) = check(source, settings=settings)
    assert finding.code == "GF202" and finding.fix is None and "not auto-fixable" in finding.message
    assert fix(source, settings=settings) == source


@pytest.mark.parametrize(
    "source, expected",
    [
        ("import torch\nfrom torch.autograd import Variable  # legacy API\nx = Variable(torch.ones(1))\n",
         "import torch\n# legacy API\nx = torch.ones(1)\n"),
        ("from torch.autograd import Variable  # legacy API\nimport torch\nx = Variable(torch.ones(1))\n",
         "# legacy API\nimport torch\nx = torch.ones(1)\n"),
        ("import torch\n\n\ndef f():\n    from torch.autograd import Variable  # old\n    return Variable(torch.ones(1))\n",
         "import torch\n\n\ndef f():\n    # old\n    return torch.ones(1)\n"),
    ],
)
def test_a_removed_imports_trailing_comment_is_kept(source, expected):
    # Issue 13: removing `from torch.autograd import Variable  # legacy API` dropped the comment.
    assert fix(source, settings=Settings(select=("GF402",), unsafe_fixes=True)) == expected


@pytest.mark.parametrize(
    "source",
    [
        "import torch\n\x0cdef f(x):\n    with torch.no_grad:\n        return x\n",
        "import torch\n\x0c\x0cdef f(x):\n    with torch.no_grad:\n        return x\n\x0c\nx = 1\n",
        "import torch\ndef f(x):\n    y = 1\n\x0c    with torch.no_grad:\n        return x\n",
        "import torch\ndef f(x):\n\x0c    with torch.no_grad:\n        return x\n",
    ],
)
def test_a_form_feed_at_a_line_start_does_not_make_a_file_unfixable(source):
    # Issue 13: LibCST drops such a form feed, so the file was "not reproduced byte for byte".
    fixed = fix(source, settings=Settings(select=("GF101",)))
    assert fixed == source.replace("no_grad:", "no_grad():")
