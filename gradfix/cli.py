"""The command line: a thin typer layer over the library.

``gradfix PATH...`` is ``gradfix check PATH...``; other commands: ``rules``, ``explain``,
``verify``.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Callable, List, Optional

import typer
import typer.main

from gradfix import __version__, plain_options
from gradfix.config import (
    CliOverrides,
    ConfigError,
    config_for_dir,
    config_for_file,
    parse_option_flag,
    settings_for,
    validate_codes,
)
from gradfix.files import PathError, discover, path_spec
from gradfix.model import FileResult, Job, Settings
from gradfix.report import (
    as_on_disk,
    file_diff,
    json_report,
    print_summary_table,
    statistics_report,
    summary,
    text_report,
    use_color,
    write_diff,
)
from gradfix.runner import run_jobs, write_results
from gradfix.cache import cache_for_run
from gradfix.selection import SelectionError, select_jobs

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Plain click output: a usage error is a short plain message (no rich panels to grep through).
    rich_markup_mode=None,
    help=(
        "Find and fix PyTorch gradient-control mistakes (no_grad, set_grad_enabled, eval, detach).\n\n"
        "`gradfix PATH...` is `gradfix check PATH...`: see `gradfix check -h` for --diff, --apply, "
        "--select and the other options. `gradfix --version` (`-V`) prints the version."
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
    return path_spec(config.exclude).match_file(rel)


def _display(path: Path) -> str:
    text = str(path)
    if os.sep == "/" and not text.startswith(("/", "..")) and os.path.normpath(text) == text:
        return text  # already relative to here (what the walk yields): relpath would be itself
    try:
        rel = os.path.relpath(path)
    except ValueError:
        rel = str(path)
    return Path(rel).as_posix()


class ColorChoice(str, Enum):
    auto = "auto"
    always = "always"
    never = "never"


COLOR_OPTION = typer.Option(
    ColorChoice.auto,
    "--color",
    help="Colour output: auto (on a terminal; NO_COLOR turns it off, FORCE_COLOR on), always or never.",
)


def _set_color(choice: ColorChoice) -> None:
    import gradfix.report

    gradfix.report.COLOR_CHOICE = choice.value


@dataclass(frozen=True)
class OutputChoices:
    """How ``check`` reports: the output flags, gathered once."""

    diff: bool = False
    apply: bool = False
    output_format: OutputFormat = OutputFormat.text
    output_file: Path | None = None
    quiet: bool = False
    statistics: bool = False
    show_fixes: bool = False
    exit_zero: bool = False
    stdin: bool = False

    @property
    def mode(self) -> str:
        return "apply" if self.apply else "diff" if self.diff else "check"


STDIN = Path("-")


@app.command("check")
def check_command(
    paths: List[Path] = typer.Argument(
        None, metavar="PATH", help="Files or folders to check (folders: *.py and *.ipynb); - reads standard input."
    ),
    diff: bool = typer.Option(False, "--diff", help="Print the fixes as a unified diff; write nothing."),
    apply: bool = typer.Option(
        False, "--apply", "--fix", help="Rewrite files in place (standard input: print the fixed source)."
    ),
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
    output_file: Optional[Path] = typer.Option(
        None,
        "--output-file",
        "-O",
        metavar="FILE",
        help="Write the report here, not to stdout (with --diff: write the diff here).",
    ),
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
    stdin_filename: Optional[Path] = typer.Option(
        None,
        "--stdin-filename",
        metavar="PATH",
        help="The path of the source read from standard input: its config applies and messages name it.",
    ),
    statistics: bool = typer.Option(False, "--statistics", help="Print the number of findings per rule, not each finding."),
    exit_zero: bool = typer.Option(False, "--exit-zero", help="Exit 0 even when findings remain (errors still exit 2)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print the findings only: no summary, table or notes."),
    show_fixes: bool = typer.Option(
        False, "--show-fixes", help="Name each finding's fix; with --diff/--apply, list each fix made, not only the count."
    ),
    color: ColorChoice = COLOR_OPTION,
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks of internal errors."),
    # -- scale: cache, shards, changed files (gradfix.cache, gradfix.selection) --
    no_cache: bool = typer.Option(
        False, "--no-cache", help="Neither read nor write the result cache (.gradfix_cache/, or $GRADFIX_CACHE_DIR)."
    ),
    shard: Optional[str] = typer.Option(
        None, "--shard", metavar="K/N", help="Check only shard K of N (1-based; a stable split by path), e.g. for a CI matrix."
    ),
    changed_since: Optional[str] = typer.Option(
        None, "--changed-since", metavar="REF", help="Check only files changed against git REF (and untracked files)."
    ),
) -> None:
    """Report findings (default), show fixes (--diff) or apply them (--apply)."""
    _set_color(color)
    paths = list(paths or [])
    stdin = STDIN in paths or (not paths and stdin_filename is not None)
    if not paths and not stdin:
        _err("no path given (a file, a folder, or - for standard input; see gradfix check -h)")
        raise typer.Exit(2)
    if stdin and any(p != STDIN for p in paths):
        _err("- (standard input) cannot be combined with other paths")
        raise typer.Exit(2)
    if stdin and (interactive or verify_cmd is not None):
        _err("--interactive and --verify-cmd need files, not standard input")
        raise typer.Exit(2)
    if diff and apply:
        _err("--diff and --apply cannot be used together")
        raise typer.Exit(2)
    if verify_cmd is not None and (not apply or interactive):
        _err("--verify-cmd needs --apply (and no --interactive)")
        raise typer.Exit(2)
    if interactive and not sys.stdin.isatty():
        _err("--interactive needs a terminal on standard input")
        raise typer.Exit(2)
    if statistics and output_format not in (OutputFormat.text, OutputFormat.json):
        _err("--statistics works with --format text or json")
        raise typer.Exit(2)
    out = OutputChoices(diff, apply, output_format, output_file, quiet, statistics, show_fixes, exit_zero, stdin)
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
        walk_errors: list[str] = []  # a folder that cannot be read is reported, the walk goes on

        def folder_error(message: str) -> None:
            _err(message)
            walk_errors.append(message)

        if stdin:
            jobs_list, path_errors = [_stdin_job(stdin_filename, cli)], 0
        else:
            jobs_list, path_errors = _jobs_for(paths, cli, exclude, notebooks, folder_error)
    except ConfigError as exc:
        _err(str(exc))
        raise typer.Exit(2)
    try:
        jobs_list = select_jobs(jobs_list, shard, changed_since)
    except SelectionError as exc:
        _err(str(exc))
        raise typer.Exit(2)
    if not jobs_list:
        if path_errors or walk_errors:
            raise typer.Exit(2)
        _err("no Python files found" if not (shard or changed_since) else "no files to check in this selection")
    elif not quiet:
        # Command line and config alike: each folder's settings once, each warning once.
        warnings = {}
        for settings in {id(job.settings): job.settings for job in jobs_list}.values():
            warnings.update(dict.fromkeys(_inert_extend_select(settings, settings.extend_select)))
        for warning in warnings:
            _err(warning)
    cache = cache_for_run(not no_cache) if not (stdin or diff or apply or interactive or verify_cmd) else None  # report mode only
    if cache is None:
        from gradfix.engine import with_project_index

        jobs_list = with_project_index(jobs_list)  # with a cache, the runner builds it from the bytes it reads
    if verify_cmd is not None:
        raise typer.Exit(_migrate(jobs_list, verify_cmd, jobs))
    if interactive:
        raise typer.Exit(_review(jobs_list, jobs))
    try:
        if stdin:
            results = [_process_stdin(jobs_list[0], diff or apply)]
        else:
            want_edits = output_format is OutputFormat.sarif  # SARIF carries each finding's own fix
            results = _run_with_progress(jobs_list, diff or apply, jobs, output_format is OutputFormat.text, want_edits, cache)
        exit_code = _emit(results, jobs_list, out, path_errors)
        if path_errors or walk_errors:
            exit_code = 2
    except KeyboardInterrupt:
        # Writes are atomic and one at a time: every file is either old or new.
        _err("interrupted; files already written are complete, the rest are unchanged")
        raise typer.Exit(130)
    if exit_zero and exit_code == 1:
        exit_code = 0
    raise typer.Exit(exit_code)


def _jobs_for(
    paths: list[Path], cli: CliOverrides, exclude: list[str], notebooks: bool, on_error: Callable[[str], None]
) -> tuple[list[Job], int]:
    """One job per file found under ``paths``, with that file's settings; and how many paths
    were bad (each reported: the other paths are still checked). A folder that cannot be read
    goes to ``on_error`` and the walk goes on."""
    jobs_list = []
    settings_of = _settings_resolver(cli)
    path_errors = 0
    excludes = list(exclude)
    extensions = (".py", ".ipynb") if notebooks else (".py",)
    for path in paths:
        excludes_here = excludes
        if path.is_dir():
            config = config_for_dir(path.resolve())
            if config.root is not None and config.root == path.resolve():
                excludes_here = excludes + list(config.exclude)  # prune while walking (same base)
        try:
            for found in discover([path], exclude=excludes_here, extensions=extensions, on_error=on_error):
                config, settings = settings_of(found.path, found.explicit)
                if not found.explicit and _excluded_by_config(found.path, config):
                    continue
                jobs_list.append(Job(str(found.path), settings, _display(found.path)))
        except PathError as exc:
            _err(str(exc))
            path_errors += 1
    return jobs_list, path_errors


def _stdin_job(stdin_filename: Path | None, cli: CliOverrides) -> Job:
    """Standard input, checked as if it were ``stdin_filename`` (its config, its per-file
    ignores, its name in messages; ``.ipynb``: a notebook), else as ``-`` in the current folder."""
    if stdin_filename is None:
        config = config_for_dir(Path.cwd().resolve())
        return Job("-", settings_for(Path.cwd() / "-", config, cli), "-")
    config = config_for_file(stdin_filename)
    return Job(str(stdin_filename), settings_for(stdin_filename, config, cli), _display(stdin_filename))


def _process_stdin(job: Job, want_fixes: bool) -> FileResult:
    from gradfix.engine import process_source

    source = sys.stdin.buffer.read()
    try:
        return process_source(source, job, want_fixes)
    except Exception as exc:  # as for a file: a bug in gradfix is one readable error
        if os.environ.get("GRADFIX_DEBUG"):
            raise
        return FileResult(job.display, old_source=source, error=f"internal error: {type(exc).__name__}: {exc}", error_kind="internal")


def _inert_extend_select(settings: Settings, patterns: tuple[str, ...]) -> list[str]:
    """A warning for each ``extend-select`` pattern (command line or config) that turns on no rule."""
    if not patterns:
        return []  # without importing every rule (a warm cached run needs none)
    from dataclasses import replace

    from gradfix.engine import selected_rules
    from gradfix.rules import rule_entries

    warnings = []
    enabled = {r.code for r in selected_rules(settings)}
    for pattern in dict.fromkeys(patterns):
        if pattern == "ALL":
            continue
        others = tuple(p for p in settings.extend_select if p != pattern)
        if {r.code for r in selected_rules(replace(settings, extend_select=others))} != enabled:
            continue
        matching = [r for r in rule_entries() if r.code.startswith(pattern)]
        ignored = [r.code for r in matching if any(r.code.startswith(p) for p in settings.ignore)]
        on = [r.code for r in matching if r.code in enabled]
        off = [r.code for r in matching if r.code not in enabled and r.code not in ignored]
        reasons = []
        if on:
            reasons.append(f"{', '.join(on)} {'is' if len(on) == 1 else 'are'} already on")
        if off:
            reasons.append(f"off-by-default {', '.join(off)} need{'s' * (len(off) == 1)} the full code (--extend-select {off[0]})")
        if ignored:
            reasons.append(f"{', '.join(ignored)} {'is' if len(ignored) == 1 else 'are'} ignored")
        warnings.append(f"extend-select {pattern} enables no rule: {'; '.join(reasons)}")
    return warnings


PROGRESS_MIN_FILES = 50


def _folder_config(folder: str, known: dict[str, object]):
    """``config_for_dir`` of a walked folder: its parent's, unless the folder itself holds a
    pyproject.toml or a .git. The walk follows no link below the folder it started from, so
    that is the question config_for_dir asks of the resolved path, without resolving it."""
    parent = known.get(os.path.dirname(folder))
    if parent is not None and folder and not (
        os.path.isfile(os.path.join(folder, "pyproject.toml")) or os.path.lexists(os.path.join(folder, ".git"))
    ):
        return parent
    return config_for_dir(Path(folder).resolve())


def _settings_resolver(cli: CliOverrides):
    """(config, settings) of a file, looked up once per folder; one Settings object per config
    unless per-file-ignores make them differ (a named file: by its own resolved path)."""
    folders: dict[str, object] = {}
    shared: dict[int, Settings] = {}

    def settings_of(path: Path, explicit: bool):
        if explicit:
            config = config_for_file(path)
        else:
            folder = os.path.dirname(path)  # a string: cheaper to hash than a Path, once per file
            config = folders.get(folder)
            if config is None:
                config = folders[folder] = _folder_config(folder, folders)
        if config.per_file_ignores:
            return config, settings_for(path, config, cli)
        if id(config) not in shared:
            shared[id(config)] = settings_for(path, config, cli)
        return config, shared[id(config)]

    return settings_of


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

    for job in jobs_list:
        if job.path.endswith(".ipynb"):
            _err(f"{job.display}: interactive review does not cover notebooks yet: its findings are listed below; use --diff / --apply for it")
    results = run_jobs(jobs_list, want_fixes=False, workers=workers, want_edits=True)  # each fix's own hunk
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


def _run_with_progress(
    jobs_list: list[Job], want_fixes: bool, workers: int | None, text: bool, want_edits: bool = False, cache=None
):
    """A progress bar on stderr for big runs, only on a terminal and only for text output."""
    if not (text and len(jobs_list) >= PROGRESS_MIN_FILES and sys.stderr.isatty()):
        return run_jobs(jobs_list, want_fixes=want_fixes, workers=workers, want_edits=want_edits, cache=cache)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("gradfix"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=True, console=_stderr_console()) as bar:
        task = bar.add_task("files", total=len(jobs_list))
        advance = lambda _: bar.advance(task)  # noqa: E731
        return run_jobs(jobs_list, want_fixes=want_fixes, workers=workers, progress=advance, want_edits=want_edits, cache=cache)


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True)


def _emit(results: list[FileResult], jobs_list: list[Job], out: OutputChoices, path_errors: int = 0) -> int:
    """Write the report, the diff or the fixed standard input; returns the exit code.

    stdout carries one thing: the diff (``--diff``), the fixed source (standard input with
    ``--apply``) or the report; the report then goes to stderr. With ``--diff``, ``-O FILE``
    takes the diff and the report stays on stdout; a machine-readable report (json, sarif,
    github) always keeps stdout to itself.
    """
    unsafe = any(j.settings.unsafe_fixes for j in jobs_list)
    if out.apply and not out.stdin:
        write_results(results, jobs_list)
    machine = out.output_format is not OutputFormat.text
    for result in results:
        if not out.quiet:
            for note in result.notes:
                _err(f"{result.path}: {note}")
        if result.error_kind in ("io", "internal"):  # write errors too: one line each
            message = result.error if result.error.startswith("cannot") else f"{result.path}: {result.error}"
            _err(message)
        elif result.error_kind == "syntax" and out.output_format in (OutputFormat.json, OutputFormat.sarif):
            # The report carries it too; stderr says it in one line why the exit status is 2.
            _err(f"{result.path}:{result.error}")
    fix_output: bytes | None = None  # the patch, or the fixed standard input
    if out.diff:
        fix_output = b"".join(file_diff(r) for r in sorted(results, key=lambda r: r.path))
        results = as_on_disk(results)
    elif out.apply and out.stdin:
        (result,) = results
        fix_output = result.new_source if result.changed else (result.old_source or b"")
    report = "".join(line + "\n" for line in _report_lines(results, jobs_list, out, unsafe, path_errors))
    report_stream = sys.stdout
    if fix_output is not None:
        if out.diff and out.output_file is not None:
            if not _write_file(out.output_file, fix_output):
                return 2
        elif out.diff and machine:
            if fix_output and not out.quiet:
                _err(f"the diff is not printed: stdout carries the {out.output_format.value} report (write the diff with -O FILE)")
        else:
            write_diff(fix_output) if out.diff else _write_stdout_bytes(fix_output)
            report_stream = sys.stderr
    if out.output_file is not None and not out.diff:
        if not _write_file(out.output_file, report.encode("utf-8")):
            return 2
    else:
        report_stream.write(report)
        report_stream.flush()
        if not (machine or out.quiet or out.statistics) and use_color(report_stream):
            print_summary_table(results, report_stream, out.mode)
    if any(r.error for r in results):
        return 2
    remaining = any(not o.applied for r in results for o in r.findings)
    if out.diff:
        return 1 if remaining or any(r.changed for r in results) or any(r.findings for r in results) else 0
    return 1 if remaining else 0


def _report_lines(
    results: list[FileResult], jobs_list: list[Job], out: OutputChoices, unsafe: bool, path_errors: int
) -> list[str]:
    if out.statistics and out.output_format is OutputFormat.json:
        return statistics_report(results, unsafe, as_json=True)
    if out.output_format is OutputFormat.text:
        if out.statistics:
            lines = statistics_report(results, unsafe)
        else:
            lines = text_report(results, unsafe, out.mode, out.show_fixes)
        return lines if out.quiet else lines + [summary(results, unsafe, out.mode, path_errors)]
    if out.output_format is OutputFormat.json:
        return [json_report(results, applied_mode=out.apply)]
    if out.output_format is OutputFormat.sarif:
        from gradfix.sarif import sarif_report

        return [sarif_report(results)]
    from gradfix.sarif import github_report

    return github_report(results)


def _write_file(path: Path, data: bytes) -> bool:
    try:
        path.write_bytes(data)
    except OSError as exc:
        _err(f"cannot write {path}: {exc.strerror}")
        return False
    return True


def _write_stdout_bytes(data: bytes) -> None:
    sys.stdout.flush()
    getattr(sys.stdout, "buffer", sys.stdout).write(data)
    sys.stdout.flush()


class RulesFormat(str, Enum):
    text = "text"
    json = "json"


def rules_as_json() -> str:
    """Every rule as the JSON of ``gradfix rules --format json``."""
    from gradfix.rules import all_rules

    rows = [
        {
            "code": r.code,
            "name": r.name,
            "summary": r.summary,
            "fix": r.fix_safety.value if r.fix_safety else None,
            "fix_title": r.fix_title,
            "default_enabled": r.default_enabled,
            "options": [{"name": o.name, "choices": list(o.choices), "default": o.default, "help": o.help} for o in r.options],
        }
        for r in all_rules()
    ]
    return json.dumps(rows, indent=2)


@app.command("rules")
def rules_command(
    output_format: RulesFormat = typer.Option(RulesFormat.text, "--format", help="text (a table) or json."),
    color: ColorChoice = COLOR_OPTION,
) -> None:
    """List every rule: code, name, fix safety, on by default."""
    from gradfix.rules import all_rules

    _set_color(color)
    if output_format is RulesFormat.json:
        print(rules_as_json())
        return
    rows = [
        (r.code, r.name, r.fix_safety.value if r.fix_safety else "none", "yes" if r.default_enabled else "no", r.summary)
        for r in all_rules()
    ]
    if use_color(sys.stdout):
        from rich.table import Column, Table

        from gradfix.report import console_for

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
        console_for(sys.stdout).print(table)
        return
    print("code\tname\tfix\tdefault\tsummary")
    for row in rows:
        print("\t".join(row))


@app.command("explain")
def explain_command(
    code: str = typer.Argument(..., metavar="RULE", help="A rule code or name, e.g. GF202 or nested-toggle-hack."),
    color: ColorChoice = COLOR_OPTION,
) -> None:
    """Show a rule's documentation (rendered on a terminal, plain Markdown when piped)."""
    from gradfix.explain import explain_text, find_rule

    _set_color(color)
    rule = find_rule(code)
    if rule is None:
        _err(f"unknown rule {code!r} (see `gradfix rules`)")
        raise typer.Exit(2)
    text = explain_text(rule)
    if use_color(sys.stdout):
        from rich.markdown import Markdown

        from gradfix.report import console_for

        console_for(sys.stdout).print(Markdown(text))
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


@app.command("server")
def server_command() -> None:
    """Run the language server over stdio, for editors (needs gradfix[lsp])."""
    try:
        import pygls  # noqa: F401
    except ImportError:
        _err("gradfix server needs pygls: pip install 'gradfix[lsp]'")
        raise typer.Exit(2)
    from gradfix.server import serve

    serve()


@app.command("version")
def version_command() -> None:
    """Print the version."""
    print(f"gradfix {__version__}")


COMMANDS = {"check", "rules", "explain", "verify", "server", "version"}


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("--version", "-V"):
        print(f"gradfix {__version__}")  # without building the typer app (its option parsing imports pydantic)
        return
    if args and args[0] not in COMMANDS and args[0] not in ("-h", "--help"):
        args = ["check", *args]
    debug = "--debug" in args
    previous = os.environ.get("GRADFIX_DEBUG")
    if debug:
        os.environ["GRADFIX_DEBUG"] = "1"  # workers add tracebacks to per-file internal errors
    try:
        command = typer.main.get_command(app)
        plain_options.install(command)  # option values coerced without importing pydantic
        command(args=args, prog_name="gradfix")  # exits with the command's code
    except KeyboardInterrupt:
        _err("interrupted; files already written are complete, the rest are unchanged")
        sys.exit(130)
    except Exception as exc:  # the last line of defence: one readable line, not a traceback
        if debug:
            raise
        _err(f"internal error: {type(exc).__name__}: {exc} (run with --debug for details)")
        sys.exit(2)
    finally:  # a library caller's environment is left as it was (tests call main() in-process)
        if debug:
            if previous is None:
                os.environ.pop("GRADFIX_DEBUG", None)
            else:
                os.environ["GRADFIX_DEBUG"] = previous
