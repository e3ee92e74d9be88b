"""Awkward rewrites and wrong findings left on the round-8 sample after stop 21
(bench/precision/verdicts8.tsv), one fixture per shape, written for these tests."""

from __future__ import annotations

import textwrap

from gradfix import Settings, check, fix
from gradfix.engine import fix_until_stable

VARIABLE = Settings(select=("GF401", "GF402"), unsafe_fixes=True)


def _fix(source: str, settings: Settings) -> str:
    fixed = fix(source, settings=settings)
    compile(fixed, "<fixed>", "exec")
    assert fix(fixed, settings=settings) == fixed  # idempotent
    return fixed


LOADER_LOOP = """\
import torch
from torch.autograd import Variable


def train(net, loader, opt):
    for im, label in loader:
        if torch.cuda.is_available():
            im = Variable(im.cuda())
            label = Variable(label.cuda(), volatile=True)
        else:{else_comment}
            im = Variable(im)
            label = Variable(label, volatile=True){inner}
{after}        net(im).sum().backward()
"""


def _loader(else_comment: str = "", inner: str = "", after: str = "") -> str:
    return LOADER_LOOP.format(else_comment=else_comment, inner=inner, after=after)


def test_an_else_branch_that_only_rewraps_batches_goes_with_its_lines():
    source = _loader()
    fixed = _fix(source, VARIABLE)
    assert "else" not in fixed and "Variable" not in fixed, fixed
    assert "            im = im.cuda()\n            label = label.cuda()\n        net(im)" in fixed, fixed
    findings = check(source, "t.py", VARIABLE)
    titles = {f.line: f.fix_title for f in findings}
    assert titles[11].startswith("Remove the `else` branch") and titles[12].startswith("Remove the `else` branch"), titles
    # one edit fixes both findings of the branch: both count as fixed, in one pass
    stable = fix_until_stable(source.encode(), findings, VARIABLE)
    assert len(stable.fixed) == 4 and stable.remaining == [], stable


def test_an_else_branch_with_a_comment_keeps_its_lines_as_the_exact_alias():
    for variant in (
        _loader(else_comment="  # on the CPU"),
        _loader(inner="\n            # the CPU path"),
        _loader(after="            # the CPU path ends here\n"),
    ):
        fixed = _fix(variant, VARIABLE)
        assert "        else:" in fixed and "im = im.detach()" in fixed, fixed
        assert "#" in fixed


def test_a_comment_after_the_branch_at_the_loop_level_stays_and_the_branch_goes():
    fixed = _fix(_loader(after="        # forward\n"), VARIABLE)
    assert "else" not in fixed, fixed
    assert "            label = label.cuda()\n        # forward\n        net(im)" in fixed, fixed


def test_an_else_branch_goes_only_when_its_fixes_are_alike_in_safety():
    # `a` is a fresh tensor (safe), `im` a loader batch (unsafe): removing the branch would
    # apply the unsafe fix along with the safe one
    source = textwrap.dedent(
        """\
        import torch
        from torch.autograd import Variable
        def train(net, loader, cuda):
            for im in loader:
                a = torch.zeros(3)
                if cuda:
                    im = Variable(im.cuda())
                else:
                    a = Variable(a)
                    im = Variable(im)
                net(im, a).sum().backward()
        """
    )
    fixed = _fix(source, VARIABLE)
    assert "        else:\n" in fixed, fixed


def test_an_elif_branch_is_not_removed():
    source = textwrap.dedent(
        """\
        from torch.autograd import Variable
        def train(net, loader, device):
            for im in loader:
                if device == "cuda":
                    im = Variable(im.cuda())
                elif device == "cpu":
                    im = Variable(im)
                net(im).sum().backward()
        """
    )
    fixed = _fix(source, VARIABLE)
    assert 'elif device == "cpu":\n            im = im.detach()\n' in fixed, fixed


def test_without_gf402_the_else_branch_stays():
    # the branch holds a GF402 call too: with GF402 off it is not this run's to remove
    only_401 = Settings(select=("GF401",), unsafe_fixes=True)
    fixed = _fix(_loader(), only_401)
    assert "        else:\n            im = Variable(im)\n        net(im)" in fixed, fixed  # only GF401's line goes

