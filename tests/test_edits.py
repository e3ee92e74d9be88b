"""Each finding's own edit is read off a few fix runs per file (linear in findings), and must be
exactly what that finding's fix alone does; the edits of the findings one run fixes, applied
together, must be that run; diffs of big files stay linear too."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from gradfix import diff as gdiff
from gradfix.engine import Job, check, decode_source, finding_edits, fix_findings, process_source
from gradfix.fixer import _overlaps, _Taken
from gradfix.model import Settings, Span, TextEdit
from gradfix.model import apply_text_edits as _applied
from gradfix.review import review
from gradfix.rules import all_rules
from gradfix.sarif import sarif_report

TESTS = Path(__file__).parent
ALL = Settings(select=tuple(r.code for r in all_rules()), unsafe_fixes=True)
SOURCES = sorted(TESTS.glob("golden/*/*.in.py")) + sorted(p for p in TESTS.glob("article/*.py"))


def _alone(source: bytes, finding, path: str) -> str | None:
    run = fix_findings(source, [finding], ALL, path)
    if run is None or 0 not in run.applied or run.source == source:
        return None
    return decode_source(run.source)


def _example_files():
    """Each rule's INVALID examples, one file per rule and options (so a rule's fixes meet)."""
    for rule in all_rules():
        by_options: dict[str, list[str]] = {}
        for example in rule.INVALID:
            by_options.setdefault(json.dumps(example.options, sort_keys=True), []).append(example.code)
        for options, codes in by_options.items():
            settings = Settings(
                select=tuple(r.code for r in all_rules()), unsafe_fixes=True, rule_options={rule.code: json.loads(options)}
            )
            yield pytest.param("\n\n".join(codes).encode(), settings, id=f"{rule.code}{'' if options == '{}' else options}")


def _check_own_edits(source: bytes, settings: Settings, path: str) -> None:
    findings = check(source, path, settings)
    edits = finding_edits(source, findings, settings, path)
    old = decode_source(source)
    for index, finding in enumerate(findings):
        if finding.fix is None:
            assert index not in edits
            continue
        mine = _applied(old, edits[index]) if index in edits else None
        run = fix_findings(source, [finding], settings, path)
        alone = None if run is None or 0 not in run.applied or run.source == source else decode_source(run.source)
        assert mine == alone, f"{finding.code} at line {finding.line}"
    # The findings one whole-file run fixes: their edits together are that run (an edit two of
    # them share, the same added import, once), but for an import only their fixes together
    # leave unused (each one's fix alone keeps it).
    whole = fix_findings(source, findings, settings, path)
    if whole is None or whole.source == source:
        return
    together = _applied(old, {e for i in whole.applied for e in edits.get(i, ())})
    expected = decode_source(whole.source)
    if together != expected:
        def code(text):
            return [line for line in text.splitlines() if not line.lstrip().startswith(("import ", "from "))]

        assert code(together) == code(expected)
        assert any(f.code in ("GF402", "GF404", "GF201", "GF205", "GF301", "GF103") for f in findings)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_recorded_edit_is_the_fix_alone(path):
    _check_own_edits(path.read_bytes(), ALL, str(path))


@pytest.mark.parametrize("source, settings", list(_example_files()))
def test_rule_examples_edits_are_the_fix_alone(source, settings):
    _check_own_edits(source, settings, "examples.py")


def _many(n: int) -> bytes:
    body = "".join(f"def f{i}(x):\n    with torch.no_grad:\n        y = Variable(x) * {i}\n    return y\n\n" for i in range(n))
    return ("import torch\nfrom torch.autograd import Variable\n\n" + body).encode()


def test_many_findings_each_get_their_own_local_edit():
    source = _many(150)
    findings = check(source, "m.py", ALL)
    assert len(findings) == 300
    edits = finding_edits(source, findings, ALL, "m.py")
    assert sorted(edits) == list(range(300))
    old = decode_source(source)
    for index in (0, 1, 151, 298, 299):
        assert _applied(old, edits[index]) == _alone(source, findings[index], "m.py")
    # A Variable fix alone keeps the import other calls still use.
    assert all("import" not in e.new and "import" not in old[e.start : e.end] for es in edits.values() for e in es)


def test_the_only_variable_call_takes_its_import_with_it():
    source = b"import torch\nfrom torch.autograd import Variable\n\ny = Variable(torch.ones(2))\n"
    findings = check(source, "one.py", ALL)
    (only,) = [i for i, f in enumerate(findings) if f.code == "GF402"]
    edits = finding_edits(source, findings, ALL, "one.py")
    assert _applied(decode_source(source), edits[only]) == _alone(source, findings[only], "one.py")
    assert "Variable" not in _applied(decode_source(source), edits[only])


def test_sarif_fixes_come_from_recorded_edits(tmp_path):
    (tmp_path / "t.py").write_bytes(_many(3))
    job = Job(str(tmp_path / "t.py"), ALL, "t.py")
    result = process_source((tmp_path / "t.py").read_bytes(), job, want_fixes=False, want_edits=True)
    sarif = json.loads(sarif_report([result]))
    entries = sarif["runs"][0]["results"]
    gf101 = [e for e in entries if e["ruleId"] == "GF101"]
    assert len(gf101) == 3
    for entry in gf101:
        (replacement,) = entry["fixes"][0]["artifactChanges"][0]["replacements"]
        assert replacement["insertedContent"]["text"] == "()"
        assert replacement["deletedRegion"]["charLength"] == 0
        assert replacement["deletedRegion"]["startLine"] == entry["locations"][0]["physicalLocation"]["region"]["endLine"]


def test_without_edits_sarif_has_no_fixes(tmp_path):
    job = Job("t.py", ALL, "t.py")
    result = process_source(_many(1), job, want_fixes=False)
    assert all("fixes" not in e for e in json.loads(sarif_report([result]))["runs"][0]["results"])


def _apply_opcodes(a, b, ops):
    out, i, j = [], 0, 0
    for tag, i1, i2, j1, j2 in ops:
        assert (i1, j1) == (i, j)
        if tag == "equal":
            assert a[i1:i2] == b[j1:j2]
            out += a[i1:i2]
        else:
            out += b[j1:j2]
        i, j = i2, j2
    assert (i, j) == (len(a), len(b))
    return out


def test_anchored_line_diff_rebuilds_the_new_text(monkeypatch):
    monkeypatch.setattr(gdiff, "_DIFFLIB_PAIRS", 4)  # the path big files take, on small inputs
    rng = random.Random(7)
    for _ in range(2000):
        a = [rng.choice("abcdefgh") + "\n" for _ in range(rng.randint(0, 30))]
        b = list(a)
        for _ in range(rng.randint(0, 6)):
            k = rng.randint(0, len(b))
            roll = rng.random()
            if roll < 0.3 and b:
                del b[min(k, len(b) - 1)]
            elif roll < 0.6:
                b.insert(k, rng.choice("abcxyz") + "\n")
            elif b:
                b[min(k, len(b) - 1)] = "q\n"
        assert _apply_opcodes(a, b, gdiff.line_opcodes(a, b)) == b


def test_big_file_diff_changes_only_the_changed_lines():
    old = _many(1500)
    new = old.replace(b"with torch.no_grad:", b"with torch.no_grad():")
    lines = gdiff.unified_diff(old, new, "m.py").decode().splitlines()
    assert [line for line in lines if line.startswith(("-", "+")) and not line.startswith(("---", "+++"))] == [
        "-    with torch.no_grad:",
        "+    with torch.no_grad():",
    ] * 1500
    to_old = gdiff.old_line_of(old, new)
    assert [to_old(n) for n in (1, 5, 7500)] == [1, 5, 7500]


def test_overlap_index_agrees_with_comparing_every_pair():
    rng = random.Random(3)
    for _ in range(2000):
        taken, accepted = _Taken(), []
        for _ in range(rng.randint(1, 25)):
            spans = []
            for _ in range(rng.randint(1, 2)):
                a = (rng.randint(1, 5), rng.randint(0, 5))
                b = (rng.randint(1, 5), rng.randint(0, 5))
                a, b = min(a, b), max(a, b)
                spans.append(Span(a[0], a[1], b[0], b[1]))
            brute = any(_overlaps(s, t) or s == t for t in accepted for s in spans)
            assert any(taken.overlaps(s) for s in spans) == brute
            if not brute:
                accepted += spans
                taken.add(spans)


def test_applied_splices_edits_in_order():
    assert _applied("abcdef", (TextEdit(4, 5, "E"), TextEdit(0, 1, ""), TextEdit(2, 2, "+"))) == "b+cdEf"


class _Console:
    def __init__(self):
        self.lines = []

    def print(self, text):
        self.lines.append(str(text))


def test_ctrl_c_in_review_says_what_was_written(tmp_path):
    jobs, results = [], []
    for name in ("a.py", "b.py"):
        path = tmp_path / name
        path.write_text("import torch\nwith torch.no_grad:\n    pass\n")
        job = Job(str(path), Settings(), name)
        jobs.append(job)
        results.append(process_source(path.read_bytes(), job, want_fixes=False, want_edits=True))
    answers = iter(["y\n"])

    def read():
        answer = next(answers, None)
        if answer is None:
            raise KeyboardInterrupt
        return answer

    console = _Console()
    with pytest.raises(KeyboardInterrupt):
        review(results, jobs, console=console, read=read)
    assert (tmp_path / "a.py").read_text().startswith("import torch\nwith torch.no_grad():")
    assert (tmp_path / "b.py").read_text() == "import torch\nwith torch.no_grad:\n    pass\n"
    assert "files already written (complete): a.py; no other file was changed" in console.lines[-1]


def test_a_misaligned_cut_is_replaced_by_the_fix_alone():
    """Two nearby GF304 fixes (a loop wrapped, a `.data` dropped in an existing no_grad) make
    the whole-file diff align the new `with` with the old one: each finding's recorded edit
    must still be exactly what its fix alone does."""
    source = (
        b"import torch as T\n\n\ndef reset(self):\n    stdv = 1.0\n    for w in self.parameters():\n"
        b"        w.data.uniform_(-stdv, stdv)\n    with T.no_grad():\n        self.bias.data.zero_()\n"
    )
    findings = check(source, "r.py", ALL)
    assert [f.code for f in findings] == ["GF304", "GF304"]
    edits = finding_edits(source, findings, ALL, "r.py")
    old = decode_source(source)
    for index, finding in enumerate(findings):
        assert _applied(old, edits[index]) == _alone(source, finding, "r.py")


def test_a_fix_that_changes_nothing_is_not_reported_fixable(monkeypatch):
    """A rule's fix that rewrites a node into the same code (here: GF101's, patched so) is no
    fix: neither the summary of --diff nor SARIF/review may offer it; JSON says why."""
    from gradfix.fixer import Edit
    from gradfix.report import json_report, summary

    rule = next(r for r in all_rules() if r.code == "GF101")

    def same(self, finding, ctx):
        node = ctx.node_at(finding.span)
        return [Edit(node, node)]

    monkeypatch.setattr(rule, "fix", same)
    source = b"import torch\nwith torch.no_grad:\n    pass\n"
    job = Job("t.py", Settings(), "t.py")
    for result in (process_source(source, job, want_fixes=True), process_source(source, job, want_fixes=False, want_edits=True)):
        (outcome,) = result.findings
        assert outcome.refused == "its fix changes nothing here" and not outcome.edit
        assert "fixable" not in summary([result], unsafe_fixes=False, mode="diff")
        assert json.loads(json_report([result], applied_mode=False))[0]["fix"]["refused"] == outcome.refused
        assert "fixes" not in json.loads(sarif_report([result]))["runs"][0]["results"][0]


def test_own_edits_take_the_same_few_fix_runs_however_many_findings(monkeypatch):
    """Linear in findings: the number of LibCST fix runs behind the own edits of a file does
    not grow with its findings (here: one run for 10 findings and for 120; none fixed alone)."""
    import gradfix.fixer as fixer

    runs = []
    real = fixer.apply_fixes

    def counted(*args, **kwargs):
        runs.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(fixer, "apply_fixes", counted)
    counts = []
    for n in (5, 60):
        source = _many(n)
        findings = check(source, "m.py", ALL)
        runs.clear()
        edits = finding_edits(source, findings, ALL, "m.py")
        assert len(edits) == 2 * n
        counts.append(len(runs))
    assert counts == [1, 1]


def test_a_file_python_cannot_compile_gets_no_fix_and_says_why():
    # ast.parse accepts a late `from __future__` import; compile() does not, so no fix can be
    # checked against the file: every fixable finding is refused with the reason, none is
    # reported as an internal error, and the bytes are left as they are.
    source = b"import torch\nfrom __future__ import print_function\nfrom torch.autograd import Variable\n\n\ndef f(m):\n    x = torch.randn(2, 3)\n    return m(Variable(x))\n"
    for want_fixes, want_edits in ((True, False), (False, True)):
        result = process_source(source, Job("t.py", ALL, "t.py"), want_fixes=want_fixes, want_edits=want_edits)
        assert [o.finding.code for o in result.findings] == ["GF402"]
        assert [o.refused for o in result.findings] == ["the file does not compile as it is"]
        assert result.new_source is None and not any(o.applied or o.edit for o in result.findings)
        assert any("does not compile as it is (SyntaxError: from __future__ imports" in n for n in result.notes), result.notes
        assert not any("internal error" in n for n in result.notes)
