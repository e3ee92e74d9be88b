"""Check each fixable finding's own edit against its fix alone, over real trees.

For every fixable finding (unsafe ones too, every rule on) of every Python file:
applying the finding's own edit (``engine.finding_edits``) to the original text must give
exactly what fixing that finding alone gives (``engine.fix_findings(source, [f])``); and the
own edits of the findings one whole-file pass fixes, applied together (an identical edit, e.g.
the same added import, counted once), must give that pass's text. The second check leaves out
files where a removed import is only unused once several findings are fixed (no finding's
own edit removes it); those are counted apart.

Slow on purpose (one LibCST pass per finding, to have the truth to compare with).
Usage: python scripts/check_own_edits.py TREE... [--unchecked]   (--unchecked: an older
engine's EXACT_EDIT_CHECK_MAX set to -1, to measure the raw cut)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from gradfix import engine
from gradfix.engine import SourceError, check, decode_source, finding_edits, fix_findings
from gradfix.files import discover
from gradfix.model import Settings, apply_text_edits
from gradfix.rules import all_rules

ALL = Settings(select=tuple(r.code for r in all_rules()), unsafe_fixes=True)


def main(argv: list[str]) -> int:
    if "--unchecked" in argv:
        argv = [a for a in argv if a != "--unchecked"]
        if hasattr(engine, "EXACT_EDIT_CHECK_MAX"):
            engine.EXACT_EDIT_CHECK_MAX = -1
    fallbacks = [0]
    try:
        from gradfix import edits as own

        exact = own._alone_text

        def counted(*args):
            fallbacks[0] += 1
            return exact(*args)

        own._alone_text = counted
    except (ImportError, AttributeError):  # an engine from before exact edits
        pass
    files = checked = mismatched = together_files = together_bad = import_only = 0
    started = time.process_time()
    for tree in argv:
        for found in discover([Path(tree)]):
            path = found.path
            if path.suffix != ".py":
                continue
            source = path.read_bytes()
            try:
                findings = check(source, str(path), ALL)
            except SourceError:
                continue
            fixable = [i for i, f in enumerate(findings) if f.fix is not None]
            if not fixable:
                continue
            files += 1
            old = decode_source(source)
            edits = finding_edits(source, findings, ALL, str(path))
            for i in fixable:
                checked += 1
                run = fix_findings(source, [findings[i]], ALL, str(path))
                alone = None if run is None or not run.applied or run.source == source else decode_source(run.source)
                mine = apply_text_edits(old, edits[i]) if i in edits else None
                if mine != alone:
                    mismatched += 1
                    print(f"MISMATCH {path}:{findings[i].line} {findings[i].code}", flush=True)
            whole = fix_findings(source, findings, ALL, str(path))
            if whole is None or whole.source == source:
                continue
            together_files += 1
            union = {e for i in whole.applied for e in edits.get(i, ())}
            try:
                combined = apply_text_edits(old, union)
            except Exception:  # noqa: BLE001 - overlapping edits: a failure of the check
                combined = None
            if combined != decode_source(whole.source):
                if combined is not None and _only_imports_differ(combined, decode_source(whole.source)):
                    import_only += 1
                else:
                    together_bad += 1
                    print(f"TOGETHER {path}", flush=True)
    print(
        f"files with fixable findings: {files}; findings checked: {checked}; own edit != fix alone: {mismatched}; "
        f"whole-file passes checked: {together_files}; own edits together != whole pass: {together_bad} "
        f"(+{import_only} differing only in import lines); fix-alone runs inside finding_edits: {fallbacks[0]}; CPU {time.process_time() - started:.0f}s"
    )
    return 1 if mismatched or together_bad else 0


def _only_imports_differ(a: str, b: str) -> bool:
    def code(text: str) -> list[str]:
        return [line for line in text.splitlines() if not line.lstrip().startswith(("import ", "from "))]

    return code(a) == code(b)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
