"""The command line: a thin typer layer over the library.

``gradfix PATH...`` is ``gradfix check PATH...``; other commands: ``rules``, ``explain``,
``verify``.
"""

from __future__ import annotations

import os
import sys
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import List, Optional

import typer

from gradfix import __version__
from gradfix.config import (
    CliOverrides,
    ConfigError,
    config_for_dir,
    config_for_file,
    parse_option_flag,
    settings_for,
    validate_codes,
)
from gradfix.engine import Job, with_project_index
from gradfix.files import PathError, discover
from gradfix.report import (
    as_on_disk,
    file_diff,
    json_report,
    print_summary_table,
    summary,
    text_report,
    use_color,
    write_diff,
)
from gradfix.runner import run_jobs, write_results

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Plain click output: a usage error is a short plain message (no rich panels to grep through).
    rich_markup_mode=None,
    help=(
        "Find and fix PyTorch gradient-control mistakes (no_grad, set_grad_enabled, eval, detach).\n\n"
        "`gradfix PATH...` is `gradfix check PATH...`: see `gradfix check -h` for --diff, --apply, "
        "--select and the other options. `gradfix --version` prints the version."
    ),
    context_settings={"help_option_names": ["-h", "--help"]},
)


class OutputFormat(str, Enum):
    text = "text"
    json = "json"
    sarif = "sarif"
    github = "github"


def _err(message: str) -> None:
    print(f"gradfix: {message}", file=sys.stderr)


def _codes(value: Optional[str], flag: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    return validate_codes([c for c in value.split(",") if c.strip()], flag)


def _excluded_by_config(path: Path, config) -> bool:
    """``exclude`` patterns of a pyproject.toml are relative to its folder, wherever gradfix is run."""
    if config.root is None or not config.exclude:
        return False
    try:
        rel = path.resolve().relative_to(config.root).as_posix()
    except ValueError:
        return False
    return _exclude_spec(config.exclude).match_file(rel)


@lru_cache(maxsize=None)
def _exclude_spec(patterns: tuple[str, ...]):
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(list(patterns))


def _display(path: Path) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        rel = str(path)
    return Path(rel).as_posix()


@app.command("check")
def check_command(
    paths: List[Path] = typer.Argument(..., metavar="PATH", help="Files or folders to check (folders: *.py and *.ipynb)."),
    diff: bool = typer.Option(False, "--diff", help="Print the fixes as a unified diff; write nothing."),
    apply: bool = typer.Option(False, "--apply", "--fix", help="Rewrite files in place."),
    unsafe_fixes: Optional[bool] = typer.Option(
        None, "--unsafe-fixes/--no-unsafe-fixes", help="Include fixes that change behaviour on purpose."
    ),
    select: Optional[str] = typer.Option(
        None,
        metavar="CODES",
        help="Comma-separated codes or prefixes to check (GF2,GF301); replaces the configured selection. "
        "Off-by-default rules need their full code; ALL selects every rule.",
    ),
    ignore: Optional[str] = typer.Option(None, metavar="CODES", help="Comma-separated codes or prefixes to skip (ALL: every rule)."),
    extend_select: Optional[str] = typer.Option(None, metavar="CODES", help="Comma-separated codes or prefixes to add to the selection."),
    option: List[str] = typer.Option(
        [], "--option", "-o", metavar="CODE.NAME=VALUE", help="Rule option, e.g. GF202.style=block (repeatable)."
    ),
    output_format: OutputFormat = typer.Option(
        OutputFormat.text, "--format", help="text (default), json, sarif (SARIF 2.1.0) or github (workflow annotations)."
    ),
    output_file: Optional[Path] = typer.Option(None, "--output-file", "-O", metavar="FILE", help="Write the report here, not to stdout."),
    exclude: List[str] = typer.Option(
        [],
        "--exclude",
        metavar="GLOB",
        help="gitignore-style pattern of paths to skip while walking a folder, relative to that folder (repeatable).",
    ),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", min=1, metavar="N", help="Worker processes (default: all cores)."),
    notebooks: bool = typer.Option(True, "--notebooks/--no-notebooks", help="Also check *.ipynb files in folders."),
    interactive: bool = typer.Option(
        False, "--interactive", "-i", help="Review each fix as a diff hunk and choose which to write (unsafe ones too)."
    ),
    verify_cmd: Optional[str] = typer.Option(
        None,
        "--verify-cmd",
        metavar="CMD",
        help="With --apply: run CMD before and after; keep only the rules' fixes after which it still passes.",
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks of internal errors."),
) -> None:
    """Report findings (default), show fixes (--diff) or apply them (--apply)."""
    if diff and apply:
        _err("--diff and --apply cannot be used together")
        raise typer.Exit(2)
    if verify_cmd is not None and (not apply or interactive):
        _err("--verify-cmd needs --apply (and no --interactive)")
        raise typer.Exit(2)
    if interactive and not sys.stdin.isatty():
        _err("--interactive needs a terminal on standard input")
        raise typer.Exit(2)
    try:
        rule_options: dict[str, dict[str, str]] = {}
        for flag in option:
            code, name, value = parse_option_flag(flag)
            rule_options.setdefault(code, {})[name] = value
        cli = CliOverrides(
            select=_codes(select, "--select"),
            ignore=_codes(ignore, "--ignore") or (),
            extend_select=_codes(extend_select, "--extend-select") or (),
            unsafe_fixes=unsafe_fixes,
            rule_options=rule_options,
        )
        jobs_list = []
        path_errors = 0  # a bad path is reported; the other paths are still checked
        excludes = list(exclude)
        extensions = (".py", ".ipynb") if notebooks else (".py",)
        for path in paths:
            excludes_here = excludes
            if path.is_dir():
                config = config_for_dir(path.resolve())
                if config.root is not None and config.root == path.resolve():
                    excludes_here = excludes + list(config.exclude)  # prune while walking (same base)
            try:
                for found in discover([path], exclude=excludes_here, extensions=extensions):
                    config = config_for_file(found.path)
                    if not found.explicit and _excluded_by_config(found.path, config):
                        continue
                    settings = settings_for(found.path, config, cli)
                    jobs_list.append(Job(str(found.path), settings, _display(found.path)))
            except PathError as exc:
                _err(str(exc))
                path_errors += 1
    except ConfigError as exc:
        _err(str(exc))
        raise typer.Exit(2)
    if not jobs_list:
        if path_errors:
            raise typer.Exit(2)
        _err("no Python files found")
    jobs_list = with_project_index(jobs_list)
    if verify_cmd is not None:
        raise typer.Exit(_migrate(jobs_list, verify_cmd, jobs))
    if interactive:
        raise typer.Exit(_review(jobs_list, jobs))
    try:
        results = _run_with_progress(jobs_list, diff or apply, jobs, output_format is OutputFormat.text)
        exit_code = _emit(results, jobs_list, diff, apply, output_format, output_file, path_errors)
        if path_errors:
            exit_code = 2
    except KeyboardInterrupt:
        # Writes are atomic and one at a time: every file is either old or new.
        _err("interrupted; files already written are complete, the rest are unchanged")
        raise typer.Exit(130)
    raise typer.Exit(exit_code)


PROGRESS_MIN_FILES = 50


def _migrate(jobs_list: list[Job], command: str, workers: int | None) -> int:
    from gradfix.migrate import migrate, render

    report = migrate(jobs_list, command, lambda js, fixes: run_jobs(js, want_fixes=fixes, workers=workers))
    for line in render(report, command):
        print(line)
    for error in report.errors:
        _err(error)
    if not report.baseline_ok or report.errors:
        return 2
    return 1 if any(not o.kept for o in report.outcomes) else 0


def _review(jobs_list: list[Job], workers: int | None) -> int:
    from gradfix.review import review

    results = run_jobs(jobs_list, want_fixes=False, workers=workers)
    errors = review(results, jobs_list)
    for error in errors:
        _err(error)
    # What is left is reported as a plain run would: an unsafe fix needs --unsafe-fixes there.
    unsafe = any(j.settings.unsafe_fixes for j in jobs_list)
    for line in text_report(results, unsafe, "apply"):
        print(line)
    print(summary(results, unsafe, "apply"))
    if errors or any(r.error for r in results):
        return 2
    return 1 if any(not o.applied for r in results for o in r.findings) else 0


def _run_with_progress(jobs_list: list[Job], want_fixes: bool, workers: int | None, text: bool):
    """A progress bar on stderr for big runs, only on a terminal and only for text output."""
    if not (text and len(jobs_list) >= PROGRESS_MIN_FILES and use_color(sys.stderr)):
        return run_jobs(jobs_list, want_fixes=want_fixes, workers=workers)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("gradfix"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=True, console=_stderr_console()) as bar:
        task = bar.add_task("files", total=len(jobs_list))
        return run_jobs(jobs_list, want_fixes=want_fixes, workers=workers, progress=lambda _: bar.advance(task))


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True)


def _emit(
    results,
    jobs_list,
    diff: bool,
    apply: bool,
    output_format: OutputFormat,
    output_file: Path | None,
    path_errors: int = 0,
) -> int:
    unsafe = any(j.settings.unsafe_fixes for j in jobs_list)
    errors = []
    if apply:
        errors += write_results(results, jobs_list)
    for result in results:
        for note in result.notes:
            _err(f"{result.path}: {note}")
        if result.error_kind in ("io", "internal"):  # write errors too: one line each
            message = result.error if result.error.startswith("cannot") else f"{result.path}: {result.error}"
            _err(message)
        elif result.error_kind == "syntax" and output_format in (OutputFormat.json, OutputFormat.sarif):
            # The json schema has no place for it: say on stderr why the exit status is 2.
            _err(f"{result.path}:{result.error}")
    if diff:
        for result in sorted(results, key=lambda r: r.path):
            patch = file_diff(result)
            if patch:
                write_diff(patch)
    mode = "apply" if apply else "diff" if diff else "check"
    if diff:
        results = as_on_disk(results)
    if output_format is OutputFormat.text:
        report_lines = text_report(results, unsafe, mode) + [summary(results, unsafe, mode, path_errors)]
    elif output_format is OutputFormat.json:
        report_lines = [json_report(results, applied_mode=apply)]
    elif output_format is OutputFormat.sarif:
        from gradfix.sarif import sarif_report

        report_lines = [sarif_report(results, {j.display: j.settings for j in jobs_list})]
    else:
        from gradfix.sarif import github_report

        report_lines = github_report(results)
    report = "".join(line + "\n" for line in report_lines)
    if output_file is not None:
        try:
            output_file.write_text(report, encoding="utf-8")
        except OSError as exc:
            _err(f"cannot write {output_file}: {exc.strerror}")
            return 2
    else:
        # With --diff, stdout carries only the patch; the report goes to stderr.
        stream = sys.stderr if diff else sys.stdout
        stream.write(report)
        stream.flush()
        if output_format is OutputFormat.text and use_color(stream):
            print_summary_table(results, stream)
    if any(r.error for r in results):
        return 2
    remaining = any(not o.applied for r in results for o in r.findings)
    if diff:
        return 1 if remaining or any(r.changed for r in results) or any(r.findings for r in results) else 0
    return 1 if remaining else 0


@app.command("rules")
def rules_command() -> None:
    """List every rule: code, name, fix safety, on by default."""
    from gradfix.rules import all_rules

    rows = [
        (r.code, r.name, r.fix_safety.value if r.fix_safety else "none", "yes" if r.default_enabled else "no", r.summary)
        for r in all_rules()
    ]
    if use_color(sys.stdout):
        from rich.console import Console
        from rich.table import Table

        from rich.table import Column

        # Codes and names are what users type: never cut them; the summary wraps.
        table = Table(
            Column("code", no_wrap=True),
            Column("name", no_wrap=True),
            Column("fix", no_wrap=True),
            "default",
            "summary",
            title="gradfix rules",
        )
        for row in rows:
            table.add_row(*row)
        Console().print(table)
        return
    print("code\tname\tfix\tdefault\tsummary")
    for row in rows:
        print("\t".join(row))


@app.command("explain")
def explain_command(code: str = typer.Argument(..., help="A rule code, e.g. GF202.")) -> None:
    """Show a rule's documentation (rendered on a terminal, plain Markdown when piped)."""
    from gradfix.rules import rule_by_code

    rule = rule_by_code(code)
    if rule is None:
        _err(f"unknown rule {code!r} (see `gradfix rules`)")
        raise typer.Exit(2)
    safety = rule.fix_safety.value if rule.fix_safety else "none (diagnostic only)"
    options = "".join(f"\n- `{o.name}`: {' | '.join(o.choices)} (default `{o.default}`) {o.help}" for o in rule.options)
    text = (
        f"# {rule.code} {rule.name}\n\n{rule.summary}.\n\nFix: {safety}. "
        f"On by default: {'yes' if rule.default_enabled else 'no'}.\n\n{rule.doc()}\n"
        + (f"\n## Options\n{options}\n" if options else "")
    )
    if use_color(sys.stdout):
        from rich.console import Console
        from rich.markdown import Markdown

        Console().print(Markdown(text))
    else:
        print(text, end="")


@app.command("verify")
def verify_command(
    paths: List[Path] = typer.Argument(None, help="Scenario files or folders (default: the shipped fixtures)."),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or all (cuda only when available)."),
    output_format: str = typer.Option("text", "--format", help="text or json."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", min=1, help="Scenario processes at once (default: all cores)."),
) -> None:
    """Prove each rule's fix by running scenarios before and after it (needs torch)."""
    if device not in ("cpu", "cuda", "all"):
        _err(f"--device {device!r}: expected cpu, cuda or all")
        raise typer.Exit(2)
    if output_format not in ("text", "json"):
        _err(f"--format {output_format!r}: expected text or json")
        raise typer.Exit(2)
    from gradfix import verify  # lazy: torch is only imported by the harness

    raise typer.Exit(verify.run(list(paths or []), device=device, output_format=output_format, jobs=jobs))


@app.command("version")
def version_command() -> None:
    """Print the version."""
    print(f"gradfix {__version__}")


COMMANDS = {"check", "rules", "explain", "verify", "version"}


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "--version":
        args = ["version"]
    elif args and args[0] not in COMMANDS and args[0] not in ("-h", "--help"):
        args = ["check", *args]
    debug = "--debug" in args
    if debug:
        os.environ["GRADFIX_DEBUG"] = "1"  # workers add tracebacks to per-file internal errors
    try:
        app(args=args, prog_name="gradfix")  # exits with the command's code
    except KeyboardInterrupt:
        _err("interrupted; files already written are complete, the rest are unchanged")
        sys.exit(130)
    except Exception as exc:  # the last line of defence: one readable line, not a traceback
        if debug:
            raise
        _err(f"internal error: {type(exc).__name__}: {exc} (run with --debug for details)")
        sys.exit(2)
