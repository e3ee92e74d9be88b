"""The fix engine: bytes outside the edits survive, a broken fix fails loudly, overlaps resolve.

Fake rules are planted by monkeypatching ``rule_entries`` in gradfix.engine and gradfix.config
(the registry a run chooses rules from), so these tests do not depend on which real rules exist; GF101 is the only real rule used.
Also here: minimal reproductions of what the corpus runner (scripts/corpus_check.py) found on
real repositories, and tests of that runner's own "nothing outside the edits changed" check.
"""

from __future__ import annotations

from dataclasses import dataclass

import importlib.util
import sys
from pathlib import Path

import libcst as cst
import pytest
from typer.testing import CliRunner

import gradfix.config as config
import gradfix.engine as engine
from gradfix import Settings, check, fix
from gradfix.cli import app
from gradfix.engine import Job, fix_findings, process_source
from gradfix.fixer import Edit, FixError
from gradfix.model import FixSafety
from gradfix.rule import Rule
from gradfix.rules import RuleEntry, all_rules, rule_entries

GF101 = Settings(select=("GF101",))
ALL = Settings(select=tuple(r.code for r in all_rules()), unsafe_fixes=True)


# -- fake rules ---------------------------------------------------------------------------------


class BrokenFix(Rule):
    """Reports every `pass`; its 'fix' produces code that does not compile."""

    code, name, summary = "GF998", "broken-fix", "test rule"
    fix_safety = FixSafety.SAFE

    def check(self, facts):
        import ast

        for node in ast.walk(facts.tree):
            if isinstance(node, ast.Pass):
                yield self.report(facts, node, "a pass")

    def fix(self, finding, ctx):
        node = ctx.node_at(finding.span, cst.Pass)
        return [Edit(node, cst.Expr(cst.Name("return")))]  # `return` at module level


class WholeWith(Rule):
    """Reports every `with` statement and rewrites the whole statement (overlaps GF101)."""

    code, name, summary = "GF997", "whole-with", "test rule"
    fix_safety = FixSafety.SAFE

    def check(self, facts):
        import ast

        for node in ast.walk(facts.tree):
            if isinstance(node, ast.With) and not any(
                isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and s.value.value == "seen"
                for s in node.body
            ):
                yield self.report(facts, node, "a with")

    def fix(self, finding, ctx):
        node = ctx.node_at(finding.span, cst.With)
        marker = cst.SimpleStatementLine([cst.Expr(cst.SimpleString('"seen"'))])
        return [Edit(node, node.with_changes(body=node.body.with_changes(body=[marker, *node.body.body])))]


class Unwrap(Rule):
    """`Wrap(x)` -> `x`, dropping `from lib import Wrap` when unused (exercises import removal)."""

    code, name, summary = "GF996", "unwrap", "test rule"
    fix_safety = FixSafety.SAFE

    def check(self, facts):
        import ast

        for node in ast.walk(facts.tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Wrap":
                yield self.report(facts, node, "a wrap")

    def fix(self, finding, ctx):
        node = ctx.node_at(finding.span, cst.Call)
        ctx.remove_import_if_unused("lib", "Wrap")
        return [Edit(node, node.args[0].value)]


class Skips(Rule):
    code, name, summary = "GF995", "skips", "test rule"
    fix_safety = FixSafety.SAFE

    def check(self, facts):
        import ast

        for node in ast.walk(facts.tree):
            if isinstance(node, ast.Pass):
                yield self.report(facts, node, "a pass")

    def fix(self, finding, ctx):
        raise FixError("cannot build this one")


@dataclass(frozen=True)
class _Planted(RuleEntry):
    """The registry entry of a fake rule: it loads the class itself."""

    rule: type | None = None

    @classmethod
    def of(cls, rule):
        return cls(rule.code, "", tuple(rule.triggers), tuple(rule.requires), rule.default_enabled, rule.uses_project, rule)

    def load(self):
        return self.rule


@pytest.fixture
def plant(monkeypatch):
    """plant(Rule, ...) adds fake rules to the engine's registry for this test."""

    def _plant(*rules):
        entries = (*rule_entries(), *map(_Planted.of, rules))
        monkeypatch.setattr(engine, "rule_entries", lambda: entries)
        monkeypatch.setattr(config, "rule_entries", lambda: entries)  # --select validation

    return _plant


def _run(source: bytes, settings: Settings):
    return process_source(source, Job("t.py", settings, "t.py"), want_fixes=True)


# -- a fix that does not compile ---------------------------------------------------------------


def test_fix_that_does_not_compile_is_dropped_with_a_note_naming_the_rule(plant):
    plant(BrokenFix)
    source = b"import torch\nwith torch.no_grad:\n    pass\n"
    result = _run(source, Settings(select=("GF101", "GF998")))
    assert any("internal error" in n and "GF998" in n for n in result.notes), result.notes
    assert "GF101" not in " ".join(result.notes)
    # GF101's fix is kept; GF998's finding stays reported, unfixed.
    assert result.new_source == b"import torch\nwith torch.no_grad():\n    pass\n"
    assert {(o.finding.code, o.applied) for o in result.findings} == {("GF101", True), ("GF998", False)}


def test_fix_that_does_not_compile_fails_loudly_in_the_cli(plant, tmp_path, monkeypatch):
    plant(BrokenFix)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_text("x = 1\nif x:\n    pass\n")
    result = CliRunner().invoke(app, ["check", "--apply", "a.py"])
    assert "a.py: internal error: GF998 produced code that does not compile" in result.stderr
    assert (tmp_path / "a.py").read_text() == "x = 1\nif x:\n    pass\n"
    assert result.exit_code == 1  # the finding is still there
    assert "Traceback" not in result.output


def test_fix_error_skips_the_fix_and_keeps_the_finding(plant):
    plant(Skips)
    result = _run(b"pass\n", Settings(select=("GF995",)))
    assert result.new_source is None
    assert [o.applied for o in result.findings] == [False]
    assert any("fix skipped" in n and "cannot build this one" in n for n in result.notes)


def test_crashing_rule_is_an_internal_error_for_that_file_only(plant, tmp_path, monkeypatch):
    class Crashes(BrokenFix):
        code = "GF994"

        def fix(self, finding, ctx):
            raise ZeroDivisionError("boom")

    plant(Crashes)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_text("pass\n")
    (tmp_path / "b.py").write_text("import torch\nwith torch.no_grad:\n    y = 1\n")
    result = CliRunner().invoke(app, ["check", "--apply", "--select", "GF101,GF994", "."])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == ["gradfix: a.py: internal error: ZeroDivisionError: boom"]
    assert (tmp_path / "a.py").read_text() == "pass\n"
    assert (tmp_path / "b.py").read_text() == "import torch\nwith torch.no_grad():\n    y = 1\n"


# -- overlapping fixes ---------------------------------------------------------------------------


def test_overlapping_fixes_outer_wins_then_the_next_pass_finishes(plant):
    plant(WholeWith)
    settings = Settings(select=("GF101", "GF997"))
    source = b"import torch\nwith torch.no_grad:\n    y = 1\n"
    # One pass: the outer edit (GF997, the whole `with`) wins, GF101's inner edit waits.
    findings = check(source, settings=settings)
    one = fix_findings(source, findings, settings)
    assert one.source == b'import torch\nwith torch.no_grad:\n    "seen"\n    y = 1\n'
    assert [findings[i].code for i in one.applied] == ["GF997"]
    # fix() and the CLI's process_source run passes until nothing changes.
    final = b'import torch\nwith torch.no_grad():\n    "seen"\n    y = 1\n'
    assert fix(source, settings=settings) == final
    result = _run(source, settings)
    assert result.new_source == final
    assert sorted((o.finding.code, o.applied) for o in result.findings) == [("GF101", True), ("GF997", True)]
    assert fix(final, settings=settings) == final


class CallsTwice(Rule):
    """`f(x)` -> `g(x)` and `g(x)` -> `h(x)`: a fix whose output is another finding (a cascade)."""

    code, name, summary = "GF993", "cascade", "test rule"
    fix_safety = FixSafety.SAFE

    def check(self, facts):
        import ast

        for node in ast.walk(facts.tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("f", "g"):
                yield self.report(facts, node, node.func.id)

    def fix(self, finding, ctx):
        node = ctx.node_at(finding.span, cst.Call)
        return [Edit(node.func, cst.Name({"f": "g", "g": "h"}[node.func.value]))]


def test_cascading_fixes_reach_a_fixpoint_in_one_apply(plant, tmp_path, monkeypatch):
    plant(CallsTwice)
    settings = Settings(select=("GF993",))
    assert fix("y = f(1)  # c\n", settings=settings) == "y = h(1)  # c\n"
    result = _run(b"y = f(1)\n", settings)
    assert result.new_source == b"y = h(1)\n"
    assert [(o.finding.message, o.applied) for o in result.findings] == [("f", True), ("g", True)]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_text("y = f(1)\n")
    first = CliRunner().invoke(app, ["check", "--select", "GF993", "--apply", "a.py"])
    assert first.exit_code == 0 and (tmp_path / "a.py").read_text() == "y = h(1)\n"
    second = CliRunner().invoke(app, ["check", "--select", "GF993", "--apply", "a.py"])
    assert second.exit_code == 0 and "Fixed 0 findings" in second.stdout


def test_two_fixes_in_one_file_do_not_break_each_other():
    source = "import torch\nwith torch.no_grad:\n    a = 1\nwith torch.enable_grad:  # x\n    b = 2\n"
    assert fix(source, settings=GF101) == (
        "import torch\nwith torch.no_grad():\n    a = 1\nwith torch.enable_grad():  # x\n    b = 2\n"
    )


# -- imports removed by a fix keep the comments around them ---------------------------------------


def test_removed_import_keeps_the_comment_above_it(plant):
    plant(Unwrap)
    source = (
        "import os\n"
        "\n"
        "# Wrap: needed by the 2017 API\n"
        "from lib import Wrap\n"
        "import torch  # the lib\n"
        "\n"
        "x = Wrap(torch.ones(2))\n"
    )
    assert fix(source, settings=Settings(select=("GF996",))) == (
        "import os\n\n# Wrap: needed by the 2017 API\nimport torch  # the lib\n\nx = torch.ones(2)\n"
    )


def test_removed_import_in_a_block_keeps_blank_lines_and_comments(plant):
    plant(Unwrap)
    source = "try:\n    import os\n\n    # the old API\n    from lib import Wrap\n    import json\nexcept ImportError:\n    raise\nx = Wrap(1)\n"
    out = fix(source, settings=Settings(select=("GF996",)))
    assert out == "try:\n    import os\n\n    # the old API\n    import json\nexcept ImportError:\n    raise\nx = 1\n"


def test_removed_last_import_of_a_block_keeps_its_comment(plant):
    plant(Unwrap)
    source = "import os\nif os.name:\n    # compat\n    from lib import Wrap\nx = Wrap(1)\n"
    out = fix(source, settings=Settings(select=("GF996",)))
    assert "# compat" in out and "Wrap" not in out
    compile(out, "t.py", "exec")


# -- bytes outside the edits -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "before, after",
    [
        (b"import torch\nwith torch.no_grad:\n    y = 1", b"import torch\nwith torch.no_grad():\n    y = 1"),  # no final newline
        (b"import torch\r\nwith torch.no_grad:\r\n    y = 1\r\n", b"import torch\r\nwith torch.no_grad():\r\n    y = 1\r\n"),
        (b"\xef\xbb\xbfimport torch\nwith torch.no_grad:\n    y = 1\n", b"\xef\xbb\xbfimport torch\nwith torch.no_grad():\n    y = 1\n"),
        (b"import torch\nif 1:\n\twith torch.no_grad:\t# tab\n\t\ty = 1  \n", b"import torch\nif 1:\n\twith torch.no_grad():\t# tab\n\t\ty = 1  \n"),
        (b"import torch\n\x0c\nwith  torch . no_grad :\n    y = 1\n", b"import torch\n\x0c\nwith  torch . no_grad() :\n    y = 1\n"),
        (
            b"# -*- coding: latin-1 -*-\nimport torch\ns = '\xe9'\nwith torch.no_grad: t = '\xe9'\n",
            b"# -*- coding: latin-1 -*-\nimport torch\ns = '\xe9'\nwith torch.no_grad(): t = '\xe9'\n",
        ),
        (
            b"import torch\nx = [1,\n  2]  ;  y = 'caf\xc3\xa9'  # \xc3\xa9\nwith torch.no_grad, \\\n     open('f') as h:\n    pass\n",
            b"import torch\nx = [1,\n  2]  ;  y = 'caf\xc3\xa9'  # \xc3\xa9\nwith torch.no_grad(), \\\n     open('f') as h:\n    pass\n",
        ),
    ],
    ids=["no-final-newline", "crlf", "bom", "tabs", "formfeed-odd-spacing", "latin-1", "continuation-utf8"],
)
def test_bytes_outside_the_edit_are_kept(before, after):
    assert fix(before, settings=GF101) == after
    assert fix(after, settings=GF101) == after


def test_formfeed_does_not_shift_suppression_lines():
    # str.splitlines() splits at \f: the comment on line 3 was looked up on the wrong line.
    source = "import torch\n\x0c\nwith torch.no_grad:  # gradfix: ignore\n    y = 1\n"
    assert check(source, settings=GF101) == []
    source = "import torch\nx = '\u2028'\nwith torch.no_grad:  # noqa: GF101\n    y = 1\n"
    assert check(source, settings=GF101) == []


def test_file_without_findings_is_not_touched_even_with_all_rules():
    source = b"import torch\r\n\r\ndef f(x):  # c\r\n\treturn x\r\n"
    result = _run(source, ALL)
    assert result.findings == [] and result.new_source is None
    assert fix_findings(source, [], ALL) is None


# -- regressions found by scripts/corpus_check.py on real repositories ---------------------------


def test_corpus_lambda_body_in_function_does_not_crash():
    # pytorch/examples fast_neural_style, fairseq, timm train.py: `child in lambda.body` raised
    # TypeError ("argument of type 'Call' is not iterable") in FileFacts.regions_around.
    # Both are also correct code: beyond not crashing, nothing may be reported or rewritten.
    source = "import torch\ndef ev(model, xs):\n    model.eval()\n    return list(map(lambda x: model(x), xs))\n"
    assert check(source, settings=ALL) == [] and fix(source, settings=ALL) == source
    source = "import torch\nwith torch.no_grad():\n    f = lambda x: x[0] if x else None\n    y = f(model(1))\n"
    assert check(source, settings=ALL) == [] and fix(source, settings=ALL) == source


# -- the corpus runner's own checks ----------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus_check():
    path = Path(__file__).resolve().parents[1] / "scripts" / "corpus_check.py"
    spec = importlib.util.spec_from_file_location("corpus_check", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["corpus_check"] = module
    spec.loader.exec_module(module)
    return module


def _region(text: str, needle: str) -> tuple[int, int]:
    start = text.index(needle)
    return (start, start + len(needle))


def test_untouched_check_accepts_edits_inside_their_regions(corpus_check):
    old = "a = 1  # keep\nv = Variable(x)\nw = Variable(y)\nz = 2\n"
    new = "a = 1  # keep\nv = x.detach()\nw = y.detach()\nz = 2\n"
    regions = [(*_region(old, "Variable(x)"), "x.detach()"), (*_region(old, "Variable(y)"), None)]
    assert corpus_check.check_untouched(old, new, regions) is None


def test_untouched_check_accepts_a_statement_inserted_before_an_edited_one(corpus_check):
    old = "def f():\n    with m:\n        y = 1\n"
    new = "def f():\n    model.eval()\n    with m:\n        y = 1\n"
    assert corpus_check.check_untouched(old, new, [(*_region(old, "with m:\n        y = 1"), None)]) is None


@pytest.mark.parametrize(
    "new",
    [
        "a = 1  # kept\nv = x.detach()\nw = y.detach()\nz = 2\n",  # comment changed
        "a = 1  # keep\nv = x.detach()\nw = y.detach()\nz = 2\r\n",  # newline changed
        "a = 1  # keep\nv = x.detach()\nw = y.detach() \nz = 2\n",  # whitespace after an expression edit
        "a = 1  # keep\nv = x.detach()\n\nw = y.detach()\nz = 2\n",  # blank line between two edits
        "a = 1  # keep\nv = x.detach()\nw = y.detach()\nz = 2 \n",  # whitespace on the next line
        "a = 1  # keep\n\nv = x.detach()\nw = y.detach()\nz = 2\n",  # blank line before
    ],
)
def test_untouched_check_rejects_any_change_outside(corpus_check, new):
    old = "a = 1  # keep\nv = Variable(x)\nw = Variable(y)\nz = 2\n"
    regions = [(*_region(old, "Variable(x)"), "x.detach()"), (*_region(old, "Variable(y)"), "y.detach()")]
    assert corpus_check.check_untouched(old, new, regions) is not None
    # A statement-level edit (replacement text unknown) absorbs changes right at its edges;
    # lines further away are still checked.
    if "z = 2 " in new or "keep\n\n" in new:
        unknown = [(s, e, None) for s, e, _ in regions]
        assert corpus_check.check_untouched(old, new, unknown) is not None


def test_untouched_check_allows_only_import_lines_outside(corpus_check):
    old = "import os\nfrom lib import Wrap, other\n\nx = Wrap(1)\n"
    edit = [(*_region(old, "Wrap(1)"), "1")]
    assert corpus_check.check_untouched(old, "import os\n\nx = 1\n", edit) is None
    assert corpus_check.check_untouched(old, "import os\nfrom lib import other\n\nx = 1\n", edit) is None
    assert corpus_check.check_untouched(old, "import os\nimport torch\nfrom lib import Wrap, other\n\nx = 1\n", edit) is None
    assert corpus_check.check_untouched(old, "y = 0\n\nx = 1\n", edit) is not None
    assert corpus_check.check_untouched(old, "import os\nfrom lib import Wrap, other\n\nx = 2\n", edit) is not None


def test_corpus_runner_passes_on_a_small_tree(corpus_check, tmp_path, capsys):
    (tmp_path / "a.py").write_bytes(b"\xef\xbb\xbfimport torch\r\nwith torch.no_grad:\r\n    y = 1\r\n")
    (tmp_path / "b.py").write_text("print 'py2'\n")
    (tmp_path / "c.py").write_text("import torch\n\ndef f(x):\n    return x\n")
    assert corpus_check.main([str(tmp_path), "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "files: 3" in out and "unparsable (reported, left alone): 1" in out and "failures: 0" in out
    assert "GF101=1" in out


def test_corpus_runner_fails_on_a_broken_rule(corpus_check, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(corpus_check, "all_rules", lambda: (*all_rules(), BrokenFix))
    monkeypatch.setattr(engine, "rule_entries", lambda: (*rule_entries(), _Planted.of(BrokenFix)))
    (tmp_path / "a.py").write_text("if 1:\n    pass\n")
    assert corpus_check.main([str(tmp_path), "--jobs", "1"]) == 1
    assert "FAIL" in capsys.readouterr().out


@pytest.mark.parametrize(
    "before, after",
    [
        (
            "from torch.autograd import Variable\n\n\ndef f(t):\n    return Variable(t)\n",
            "def f(t):\n    return t.detach()\n",
        ),
        (
            "# header comment\nfrom torch.autograd import Variable\n\n\ndef f(t):\n    return Variable(t)\n",
            "# header comment\n\n\ndef f(t):\n    return t.detach()\n",
        ),
    ],
)
def test_removing_the_first_import_leaves_no_leading_blank_lines(before, after):
    assert fix(before) == after


def test_statements_moved_into_a_new_block_keep_their_blank_lines_blank():
    """Round 4 and 5: module-level statements wrapped in `with torch.no_grad():` gained a
    whitespace-only line where a blank line was (LibCST writes a top-level blank line with
    the indentation of the block it ends up in)."""
    from gradfix import Settings, fix

    code = (
        "import torch\nm = torch.nn.Linear(2, 2)\nif m.bias is not None:\n    m.weight.data.add_(1)\n\n"
        "    m.bias.data.add_(1)\nm.weight.data.add_(1)\n\nm.bias.data.zero_()\n"
    )
    fixed = fix(code, "a.py", Settings(select=("GF304",), unsafe_fixes=True))
    assert fixed.startswith("import torch\nm = torch.nn.Linear(2, 2)\nwith torch.no_grad():\n"), fixed
    assert "\n\n" in fixed and not any(line.strip() == "" and line for line in fixed.split("\n")), fixed


def test_a_new_block_steps_like_the_block_it_is_in_not_like_the_files_first_block():
    """Round 4 (a bug-repro script): class bodies stepped 8 spaces, function bodies 4, and the
    GF302 `with` got its body 8 deeper (LibCST's module default, read off the class)."""
    from gradfix import Settings, fix

    code = (
        "import torch\n\nclass M(torch.nn.Module):\n        def f(self):\n            pass\n\n"
        "def g(model, x, log):\n    model.eval()\n    y = model(x)\n    log(y)\n    return y\n\n"
        "def h(x):\n    torch.set_grad_enabled(False)\n    y = x * 2\n    torch.set_grad_enabled(True)\n    return y\n"
    )
    fixed = fix(code, "a.py", Settings(select=("GF201", "GF302"), unsafe_fixes=True))
    assert "    with torch.no_grad():\n        y = model(x)\n" in fixed, fixed
    assert "    with torch.no_grad():\n        y = x * 2\n    return y\n" in fixed, fixed
