"""Each finding's own edit is cut out of one fix pass per file (linear in findings), and must be
what that finding's fix alone does; diffs of big files stay linear too."""

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


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_recorded_edit_is_the_fix_alone(path):
    source = path.read_bytes()
    findings = check(source, str(path), ALL)
    edits = finding_edits(source, findings, ALL, str(path))
    old = decode_source(source)
    for index, finding in enumerate(findings):
        if finding.fix is None:
            assert index not in edits
            continue
        mine = _applied(old, edits[index]) if index in edits else None
        assert mine == _alone(source, finding, str(path)), f"{finding.code} at line {finding.line}"


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
