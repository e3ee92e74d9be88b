"""Verify rules by running scenarios before and after their fixes, in fresh processes.

For each scenario and each option combination (style) of its rule: gradfix's library API
rewrites a copy (all fixes of that rule, unsafe included); the original and the rewrite run in
separate fresh interpreters (``python -m gradfix.verify.probe``) with the same seeds and
deterministic settings on each device; the two observations go to the rule's contract
(:mod:`gradfix.verify.contract`), which gives the verdict.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402

from gradfix.engine import check, fix
from gradfix.model import Settings
from gradfix.rules import rule_by_code
from gradfix.verify.compare import CUDA_ATOL, CUDA_RTOL, Comparator
from gradfix.verify.contract import (
    DIAGNOSIS_VERDICT,
    EQUIVALENT_VERDICT,
    INTENDED_VERDICT,
    MISMATCH,
    Context,
    ContractError,
    Diagnosis,
    Verdict,
    resolve,
)
from gradfix.verify.scenario import Scenario

NOT_FIRED = "NOT FIRED"
ERROR = "ERROR"
SKIPPED = "skipped"
CHILD_TIMEOUT_S = 300


@dataclass
class Case:
    """One row: a scenario × style × device and its verdict."""

    scenario: Scenario
    options: dict[str, str]
    device: str
    verdict: str = SKIPPED
    detail: str = ""
    contract: str = ""
    changed: list[str] = field(default_factory=list)
    before: dict | None = None  # observation of the original
    after: dict | None = None  # observation of the rewrite
    diff_lines: int = 0

    @property
    def style(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.options.items()) or "-"

    @property
    def ok(self) -> bool:
        return self.verdict in (EQUIVALENT_VERDICT, INTENDED_VERDICT, DIAGNOSIS_VERDICT, SKIPPED)

    @property
    def failed(self) -> bool:
        return not self.ok

    def measure(self, which: str, what: str) -> Any:
        obs = self.before if which == "before" else self.after
        return None if obs is None else obs.get(what)

    def as_json(self) -> dict:
        return {
            "scenario": str(self.scenario.path),
            "rule": self.scenario.rule,
            "style": self.style,
            "device": self.device,
            "verdict": self.verdict,
            "expected": self.scenario.expect,
            "detail": self.detail,
            "contract": self.contract,
            "changed": self.changed,
            "peak_bytes_before": self.measure("before", "peak_bytes"),
            "peak_bytes_after": self.measure("after", "peak_bytes"),
            "time_s_before": self.measure("before", "time_s"),
            "time_s_after": self.measure("after", "time_s"),
        }


def style_options(rule: Any, scenario: Scenario) -> list[dict[str, str]]:
    """Every combination of the rule's option values (the styles), filtered by the scenario."""
    options = list(getattr(rule, "options", ()))
    combos = [dict(zip([o.name for o in options], values)) for values in itertools.product(*[o.choices for o in options])]
    if scenario.styles:
        combos = [c for c in combos if set(c.values()) & set(scenario.styles)] or combos[:0]
    return combos or [{}]


def rewrite(source: bytes, code: str, options: dict[str, str], path: str) -> tuple[list, bytes]:
    """The findings of rule ``code`` and the source with all its fixes (unsafe included)."""
    settings = Settings(select=(code,), unsafe_fixes=True, rule_options={code: dict(options)} if options else {})
    findings = [f for f in check(source, path, settings) if f.code == code]
    return findings, fix(source, path, settings)


def devices_for(choice: str) -> list[str]:
    """``cpu`` always; ``cuda`` when asked for and present (``all``: when present)."""
    if choice == "cpu":
        return ["cpu"]
    has_cuda = torch.cuda.is_available()
    if choice == "cuda":
        if not has_cuda:
            raise RuntimeError("--device cuda: torch.cuda.is_available() is False on this machine")
        return ["cuda"]
    return ["cpu", "cuda"] if has_cuda else ["cpu"]


class _Runner:
    """Runs scenario sources in fresh processes, once per (source, device)."""

    def __init__(self, tmp: Path, repeat: int = 0, scale: int = 1):
        self.tmp = tmp
        self.repeat = repeat
        self.scale = scale
        self.sources: dict[str, tuple[str, bytes]] = {}  # digest -> (file name, bytes)
        self.results: dict[tuple[str, str], dict | str] = {}

    def register(self, name: str, source: bytes) -> str:
        digest = hashlib.sha256(source).hexdigest()[:16]
        self.sources.setdefault(digest, (name, source))
        return digest

    def run_all(self, wanted: set[tuple[str, str]], jobs: int) -> None:
        todo = sorted(wanted - set(self.results))
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for key, result in zip(todo, pool.map(self._run, todo)):
                self.results[key] = result

    def _run(self, key: tuple[str, str]) -> dict | str:
        digest, device = key
        name, source = self.sources[digest]
        folder = self.tmp / f"{digest}-{device}"
        folder.mkdir(parents=True, exist_ok=True)
        script = folder / name
        script.write_bytes(source)
        out = folder / "observation.pt"
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parent.parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        env.update(PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0", OMP_NUM_THREADS="1",
                   CUBLAS_WORKSPACE_CONFIG=":4096:8")
        argv = [str(script), device, str(folder / "work"), str(out)]
        if self.repeat:
            argv += ["--repeat", str(self.repeat)]
        if self.scale != 1:
            argv += ["--scale", str(self.scale)]
        # CUDA runs always start a new interpreter: a CUDA context must never cross a fork.
        if device == "cpu" and _forkserver() is not None:
            result = self._run_forked(argv, folder, out)
            if not isinstance(result, str) or "ran longer than" in result:
                return result
            # A forked run that died without an observation (seen as exit 255 on a loaded 2-core
            # machine) is a failure of the harness, not a verdict: run it once more, in a fresh
            # interpreter and a clean work folder. A broken scenario fails there the same way.
            shutil.rmtree(folder / "work", ignore_errors=True)
            out.unlink(missing_ok=True)
        command = [sys.executable, "-m", "gradfix.verify.probe", *argv]
        try:
            proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=CHILD_TIMEOUT_S, cwd=folder)
        except subprocess.TimeoutExpired:
            return f"the scenario ran longer than {CHILD_TIMEOUT_S} s"
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            return "the scenario process failed: " + " | ".join(tail)
        return torch.load(out, weights_only=False)

    def _run_forked(self, argv: list[str], folder: Path, out: Path) -> dict | str:
        from gradfix.verify import probe

        log = folder / "log.txt"
        process = _forkserver().Process(target=probe.forked_main, args=(argv, str(log)))
        process.start()
        process.join(CHILD_TIMEOUT_S)
        if process.is_alive():
            process.kill()
            process.join()
            return f"the scenario ran longer than {CHILD_TIMEOUT_S} s"
        if process.exitcode != 0 or not out.exists():
            lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
            return f"the scenario process failed (exit {process.exitcode}): " + " | ".join(lines[-3:])
        return torch.load(out, weights_only=False)


_SERVER: list = []


def _forkserver():
    """A multiprocessing fork server that has imported torch once (Linux only).

    Every run is still its own process, forked from a server that has done nothing but
    import ``gradfix.verify.probe`` (torch) and ``torch._dynamo``: no scenario code, no
    tensors. Saves ~2 s of imports per run. Used for CPU runs only (CUDA runs start a new
    interpreter each). ``GRADFIX_VERIFY_SPAWN=1`` starts every run as
    ``python -m gradfix.verify.probe``.
    """
    if _SERVER:
        return _SERVER[0]
    context = None
    if sys.platform.startswith("linux") and sys.version_info >= (3, 11) and not os.environ.get("GRADFIX_VERIFY_SPAWN"):
        import multiprocessing

        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["gradfix.verify.probe", "torch._dynamo"])
    _SERVER.append(context)
    return context


def judge(scenario: Scenario, rule: Any, options: dict, before: dict, after: dict | None, device: str) -> Verdict:
    """The verdict of the rule's contract on the two observations."""
    contract = resolve(rule, options)
    comparator = Comparator(device)
    ctx = Context(before, after, scenario.roles, comparator.same)
    if isinstance(contract, Diagnosis):
        for expectation in contract.expect:
            try:
                problem = expectation.check(ctx)
            except ContractError as exc:
                problem = str(exc)
            if problem:
                return Verdict(MISMATCH, f"diagnosis not confirmed: {problem}")
        return Verdict(DIAGNOSIS_VERDICT, "; ".join(map(str, contract.expect)) or contract.summary)
    assert after is not None
    diffs = comparator.differences(before, after)
    if contract is None:
        if diffs:
            return Verdict(MISMATCH, f"unsafe fix declares no contract; first differing observable: {diffs[0]}")
        return Verdict(EQUIVALENT_VERDICT, "every observable equal")
    start = None  # first call from which differences are consequences of the intended change
    if contract.downstream:
        for d in diffs:
            if contract.allowed(d.key) and d.call is not None:
                start = d.call
                break
        if before["exception"] != after["exception"] and contract.allowed("exception"):
            raised_at = min(len(before["calls"]), len(after["calls"]))  # the call that raised
            start = raised_at if start is None else min(start, raised_at)
        if start is None and any(contract.allowed(d.key) for d in diffs):
            start = 1 << 30  # only final observables follow the change
    changed = []
    for d in diffs:
        allowed = contract.allowed(d.key) or (
            start is not None
            and not (contract.kept(d.key) and "not observed" not in d.description)
            and (d.call is None or d.call >= start)
        )
        if not allowed:
            return Verdict(MISMATCH, f"first differing observable: {d}", [x.key for x in diffs])
        changed.append(d.key)
    ctx.changed = bool(diffs)
    for expectation in contract.expect:
        try:
            problem = expectation.check(ctx)
        except ContractError as exc:
            problem = f"contract cannot be evaluated: {exc}"
        if problem:
            return Verdict(MISMATCH, f"contract: {problem}", changed)
    if not diffs:
        return Verdict(EQUIVALENT_VERDICT, "every observable equal", changed)
    what = "; ".join(map(str, contract.expect)) or contract.summary
    return Verdict(INTENDED_VERDICT, f"{what} ({len(changed)} observables changed, first: {changed[0]})", changed)


def verify(scenarios: list[Scenario], devices: list[str], jobs: int | None = None, repeat: int = 0,
           broken_fix: Any = None, scale: int = 1) -> list[Case]:
    """Verify every scenario × style × device. ``broken_fix`` (tests only) replaces the rewrite:
    a function ``(source, code, options) -> bytes``. ``repeat``/``scale`` are for benchmarks:
    N more timed runs per program, batch sizes multiplied by ``scale``."""
    jobs = jobs or os.cpu_count() or 1
    cases: list[Case] = []
    plans: list[tuple[Case, Any, str | None, str | None]] = []
    with tempfile.TemporaryDirectory(prefix="gradfix-verify-") as tmp:
        runner = _Runner(Path(tmp), repeat, scale)
        wanted: set[tuple[str, str]] = set()
        for scenario in scenarios:
            rule = rule_by_code(scenario.rule)
            source = scenario.path.read_bytes()
            if rule is None:
                for device in devices:
                    cases.append(Case(scenario, {}, device, SKIPPED, f"rule {scenario.rule} is not implemented (yet)"))
                continue
            original = runner.register(scenario.path.name, source)
            for options in style_options(rule, scenario):
                try:
                    findings, new = rewrite(source, scenario.rule, options, str(scenario.path))
                except Exception as exc:  # a crashing rule is a verification failure, not a crash
                    for device in devices:
                        cases.append(Case(scenario, options, device, ERROR, f"gradfix failed: {type(exc).__name__}: {exc}"))
                    continue
                if broken_fix is not None:
                    new = broken_fix(source, scenario.rule, options)
                contract = resolve(rule, options)
                problem = None
                if not findings:
                    problem = f"{scenario.rule} reported nothing on this scenario: it verifies nothing"
                elif not isinstance(contract, Diagnosis) and new == source:
                    problem = f"{scenario.rule} reported {len(findings)} finding(s) but rewrote nothing"
                rewritten = None
                if problem is None and not isinstance(contract, Diagnosis):
                    rewritten = runner.register(scenario.path.name, new)
                for device in devices:
                    case = Case(scenario, options, device, contract=_describe(contract))
                    case.diff_lines = _changed_lines(source, new)
                    if problem:
                        case.verdict, case.detail = NOT_FIRED, problem
                    else:
                        wanted.add((original, device))
                        if rewritten:
                            wanted.add((rewritten, device))
                    cases.append(case)
                    plans.append((case, rule, original, rewritten))
        runner.run_all(wanted, jobs)
        for case, rule, original, rewritten in plans:
            if case.verdict == NOT_FIRED:
                continue
            before = runner.results[(original, case.device)]
            after = runner.results[(rewritten, case.device)] if rewritten else None
            for which, obs in (("original", before), ("rewrite", after)):
                if isinstance(obs, str):
                    case.verdict, case.detail = ERROR, f"{which}: {obs}"
            if case.verdict == ERROR:
                continue
            case.before, case.after = before, after
            problem = _scenario_problem(before)
            if problem:
                case.verdict, case.detail = ERROR, problem
                continue
            verdict = judge(case.scenario, rule, case.options, before, after, case.device)
            case.changed = verdict.changed
            if verdict.ok and verdict.verdict != case.scenario.expect:
                case.verdict = MISMATCH
                case.detail = f"the scenario declares '{case.scenario.expect}' but the runs show '{verdict.verdict}'"
                if verdict.changed:
                    case.detail += f" (first change: {verdict.changed[0]})"
            else:
                case.verdict, case.detail = verdict.verdict, verdict.detail
    return cases


def _scenario_problem(before: dict) -> str | None:
    """A broken scenario (not a finding about the rule): it must call code through probe.call."""
    exc = before["exception"]
    if exc is not None and exc["call"] is None:
        return f"the scenario itself raised outside probe.call: {exc['type']}: {exc['message']}"
    if not before["calls"] and exc is None:
        return "the scenario made no probe.call: nothing was observed"
    return None


def _describe(contract: Any) -> str:
    if contract is None:
        return "(unsafe fix without a declared contract)"
    return contract.summary


def _changed_lines(a: bytes, b: bytes) -> int:
    import difflib

    return sum(1 for line in difflib.ndiff(a.decode().splitlines(), b.decode().splitlines()) if line[:1] in "+-")


TOLERANCE_NOTE = f"CPU: bitwise; CUDA: torch.allclose(rtol={CUDA_RTOL:g}, atol={CUDA_ATOL:g})"
