"""The article's own examples (tests/article/) get the rewrites rules.md describes.

§3.2 toggle hack -> enable_grad (block at module level, helper function inside a function),
§6.1 encoder/decoder -> detach, §6.2 save -> hoisted, §4.2 evaluate -> model.eval(),
§2.1 global toggle -> scoped, §5.3 empty grad context -> unwrapped. The expected files were
reviewed by hand; the run uses every default rule with unsafe fixes, as `--diff --unsafe-fixes`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gradfix import Settings, check, fix

ARTICLE = Path(__file__).parent / "article"
CASES = sorted(ARTICLE.glob("s*.py"))
EXPECTED_CODES = {
    "s2_1_global_toggle.py": {"GF201"},
    "s3_2_toggle_hack.py": {"GF202"},
    "s3_2_toggle_hack_in_function.py": {"GF202"},
    "s4_2_evaluate.py": {"GF104"},
    "s5_3_memory.py": {"GF204"},
    "s6_1_encoder_decoder.py": {"GF103"},
    "s6_2_save.py": {"GF203"},
}


def test_every_article_case_is_listed():
    assert {p.name for p in CASES} == set(EXPECTED_CODES)


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.stem)
def test_article_example(case: Path):
    settings = Settings(unsafe_fixes=True)
    source = case.read_bytes()
    assert {f.code for f in check(source, str(case), settings)} == EXPECTED_CODES[case.name]
    fixed = fix(source, str(case), settings)
    assert fixed == (ARTICLE / "expected" / case.name).read_bytes()
    assert check(fixed, str(case), settings) == []
    assert fix(fixed, str(case), settings) == fixed


def test_module_level_toggle_hack_runs_the_same_after_the_fix(tmp_path):
    torch = pytest.importorskip("torch")  # noqa: F841
    probe = "\nimport torch as _t\nprint('grad_fn set:', y.grad_fn is not None, 'mode after:', _t.is_grad_enabled())\n"
    outputs = []
    for source in (ARTICLE / "s3_2_toggle_hack.py", ARTICLE / "expected" / "s3_2_toggle_hack.py"):
        script = tmp_path / source.name
        script.write_text(source.read_text(encoding="utf-8") + probe, encoding="utf-8")
        run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True)
        outputs.append(run.stdout.splitlines()[-1])
    assert outputs[0] == outputs[1] == "grad_fn set: True mode after: True"
