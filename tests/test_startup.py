"""Report mode starts fast: it never imports LibCST (only fixes need it), torch, rich or pydantic.

Run in a fresh interpreter, since the test process itself has imported everything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

HEAVY = ("libcst", "torch", "rich", "rich.console", "pydantic")

PROBE = textwrap.dedent(
    """
    import json, sys
    from gradfix.cli import main
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
    print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)), file=sys.stderr)
    """
).format(heavy=HEAVY)


def _loaded(*args: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120)
    return json.loads(done.stderr.strip().splitlines()[-1])


def _file_with_findings(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("import torch\nfrom torch.autograd import Variable\n\nwith torch.no_grad:\n    y = Variable(x)\n")
    return path


def test_report_mode_imports_no_libcst_torch_or_rich(tmp_path):
    path = _file_with_findings(tmp_path)
    notebook = {
        "cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "source": path.read_text().splitlines(True)}],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
    }
    (tmp_path / "train.ipynb").write_text(json.dumps(notebook))
    for fmt in ("text", "json", "github"):
        assert _loaded(str(tmp_path), "--format", fmt, "--no-cache") == []
        assert _loaded(str(tmp_path), "--format", fmt) == []  # the cache, cold then warm


def test_version_imports_nothing_heavy():
    assert _loaded("--version") == []


def test_diff_still_imports_libcst(tmp_path):
    # The probe itself must be able to see LibCST being imported, or the tests above prove nothing.
    assert "libcst" in _loaded(str(_file_with_findings(tmp_path)), "--diff")


def test_rule_modules_import_without_libcst():
    code = "import sys; from gradfix.rules import all_rules; all_rules(); print('libcst' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr


def test_a_warm_cached_run_imports_no_analysis(tmp_path):
    path = _file_with_findings(tmp_path)
    probe = (
        "import json, sys\nfrom gradfix.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(m for m in sys.modules if m == 'gradfix.engine' or m.startswith(('gradfix.rules.', 'gradfix.facts')))), file=sys.stderr)\n"
    )
    env = {**os.environ, "GRADFIX_CACHE_DIR": str(tmp_path / "cache")}

    def loaded() -> list[str]:
        done = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=120, env=env)
        return json.loads(done.stderr.strip().splitlines()[-1])

    assert "gradfix.engine" in loaded()  # cold: the file is analysed (the probe sees imports)
    assert loaded() == []  # warm: walk, config, cache and report only


def test_a_file_loads_only_the_rule_modules_it_triggers(tmp_path):
    # Rules are chosen from gradfix/rules/index.py; a rule module is imported only when a file
    # contains one of its trigger strings (`Variable` here triggers GF401, GF402, GF404, "grad"
    # GF101/GF204, "autograd" GF102; GF301 is off by default; no backward, .eval(),
    # set_grad_enabled, save or .data).
    path = tmp_path / "one.py"
    path.write_text("import torch\nfrom torch.autograd import Variable\n\nwith torch.no_grad:\n    y = Variable(x)\n")
    probe = (
        "import json, sys\nfrom gradfix.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(m.rsplit('.', 1)[1][:5] for m in sys.modules if m.startswith('gradfix.rules.gf'))), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(path), "--no-cache"], capture_output=True, text=True, timeout=120)
    assert "GF101" in done.stdout and "GF402" in done.stdout, done.stdout
    assert json.loads(done.stderr.strip().splitlines()[-1]) == ["gf101", "gf102", "gf204", "gf401", "gf402", "gf404"]
