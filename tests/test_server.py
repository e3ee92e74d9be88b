"""``gradfix server`` end to end: a real LSP client (pytest-lsp) drives the server over stdio."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pygls")
pytest_lsp = pytest.importorskip("pytest_lsp")

from lsprotocol import types  # noqa: E402
from pytest_lsp import ClientServerConfig, LanguageClient  # noqa: E402

BUGGY = "import torch\n\n\ndef f(x):\n    with torch.no_grad:\n        y = x * 2\n    return y\n"
FIXED = BUGGY.replace("no_grad:", "no_grad():")
# GF304 (unsafe fix) and GF101 (safe) in one buffer.
MIXED = BUGGY + "\n\ndef ema(p, q):\n    p.data.copy_(q)\n"
DIAGNOSTICS = types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "gradfix", "server"]))
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(types.InitializeParams(capabilities=types.ClientCapabilities()))
    yield
    await lsp_client.shutdown_session()


def _uri(path: Path) -> str:
    return path.resolve().as_uri()


async def _open(client: LanguageClient, path: Path, text: str, version: int = 1) -> list[types.Diagnostic]:
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(types.TextDocumentItem(_uri(path), "python", version, text))
    )
    await client.wait_for_notification(DIAGNOSTICS)
    return list(client.diagnostics[_uri(path)])


async def _change(client: LanguageClient, path: Path, text: str, version: int) -> None:
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(version=version, uri=_uri(path)),
            [types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


def _apply(text: str, edits: list[types.TextEdit]) -> str:
    """Apply LSP edits (ASCII sources here: characters are UTF-16 units) to ``text``."""
    lines = text.splitlines(keepends=True)

    def offset(position: types.Position) -> int:
        return sum(len(line) for line in lines[: position.line]) + position.character

    for edit in sorted(edits, key=lambda e: offset(e.range.start), reverse=True):
        text = text[: offset(edit.range.start)] + edit.new_text + text[offset(edit.range.end) :]
    return text


def _whole(text: str) -> types.Range:
    return types.Range(types.Position(0, 0), types.Position(len(text.splitlines()) + 1, 0))


async def _actions(client: LanguageClient, path: Path, where: types.Range, only=None) -> list[types.CodeAction]:
    result = await client.text_document_code_action_async(
        types.CodeActionParams(
            types.TextDocumentIdentifier(_uri(path)), where, types.CodeActionContext(diagnostics=[], only=only)
        )
    )
    return list(result or [])


@pytest.mark.asyncio
async def test_open_fix_and_the_diagnostic_is_gone(client: LanguageClient, tmp_path: Path):
    path = tmp_path / "train.py"
    path.write_text("# on disk: not what the editor holds\n")  # the unsaved buffer is what counts
    (diagnostic,) = await _open(client, path, BUGGY)
    assert diagnostic.code == "GF101" and diagnostic.source == "gradfix"
    assert (diagnostic.range.start.line, diagnostic.range.start.character) == (4, 9)  # CLI: 5:10

    actions = await _actions(client, path, diagnostic.range)
    quick = [a for a in actions if a.kind == types.CodeActionKind.QuickFix]
    assert len(quick) == 1 and quick[0].is_preferred and quick[0].title.startswith("GF101:")
    new = _apply(BUGGY, quick[0].edit.changes[_uri(path)])
    assert new == FIXED

    await _change(client, path, new, 2)
    await client.wait_for_notification(DIAGNOSTICS)
    assert list(client.diagnostics[_uri(path)]) == []


@pytest.mark.asyncio
async def test_unsafe_fix_is_labelled_and_fix_all_applies_only_safe_ones(client: LanguageClient, tmp_path: Path):
    path = tmp_path / "ema.py"
    diagnostics = await _open(client, path, MIXED)
    assert sorted(d.code for d in diagnostics) == ["GF101", "GF304"]
    gf304 = next(d for d in diagnostics if d.code == "GF304")
    (unsafe,) = [a for a in await _actions(client, path, gf304.range) if a.kind == types.CodeActionKind.QuickFix]
    assert "unsafe" in unsafe.title and not unsafe.is_preferred
    # GF304 decorates a function whose whole body is the write (one no_grad for the function).
    assert "@torch.no_grad()\ndef ema(p, q):\n    p.copy_(q)\n" in _apply(MIXED, unsafe.edit.changes[_uri(path)])

    (fix_all,) = await _actions(client, path, _whole(MIXED), only=["source.fixAll"])
    assert fix_all.kind == "source.fixAll.gradfix"
    assert _apply(MIXED, fix_all.edit.changes[_uri(path)]) == MIXED.replace("no_grad:", "no_grad():")


@pytest.mark.asyncio
async def test_same_findings_as_the_cli_with_the_nearest_pyproject(client: LanguageClient, tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text('[tool.gradfix]\nignore = ["GF304"]\n')
    path = tmp_path / "pkg" / "ema.py"
    path.parent.mkdir()
    path.write_text(MIXED)
    diagnostics = await _open(client, path, MIXED)
    cli = subprocess.run(
        [sys.executable, "-m", "gradfix", "--format", "json", str(path)], capture_output=True, text=True, cwd=tmp_path
    )
    rows = json.loads(cli.stdout)
    assert [(r["code"], r["line"] - 1, r["column"] - 1) for r in rows] == [
        (d.code, d.range.start.line, d.range.start.character) for d in diagnostics
    ]
    assert [d.code for d in diagnostics] == ["GF101"]


@pytest.mark.asyncio
async def test_syntax_error_mid_typing_clears_old_findings(client: LanguageClient, tmp_path: Path):
    path = tmp_path / "typing.py"
    assert [d.code for d in await _open(client, path, BUGGY)] == ["GF101"]
    await _change(client, path, BUGGY + "def broken(:\n", 2)
    await client.wait_for_notification(DIAGNOSTICS)
    (diagnostic,) = client.diagnostics[_uri(path)]
    assert diagnostic.code is None and "cannot check" in diagnostic.message and diagnostic.range.start.line == 7
    # Still alive: hover and code actions answer, and fixing the typo brings findings back.
    assert await _actions(client, path, _whole(BUGGY)) == []
    await _change(client, path, BUGGY + "def fine():\n    pass\n", 3)
    await client.wait_for_notification(DIAGNOSTICS)
    assert [d.code for d in client.diagnostics[_uri(path)]] == ["GF101"]


@pytest.mark.asyncio
async def test_hover_shows_the_rule_documentation(client: LanguageClient, tmp_path: Path):
    path = tmp_path / "h.py"
    (diagnostic,) = await _open(client, path, BUGGY)
    result = await client.text_document_hover_async(
        types.HoverParams(types.TextDocumentIdentifier(_uri(path)), diagnostic.range.start)
    )
    assert result is not None and result.contents.value.startswith("# GF101 context-manager-not-called")
    nothing = await client.text_document_hover_async(
        types.HoverParams(types.TextDocumentIdentifier(_uri(path)), types.Position(0, 0))
    )
    assert nothing is None


@pytest.mark.asyncio
async def test_a_burst_of_edits_on_a_large_file_is_checked_once_and_requests_still_answer(
    client: LanguageClient, tmp_path: Path
):
    path = tmp_path / "big.py"
    body = "".join(f"\n\ndef f{i}(x):\n    with torch.no_grad():\n        y = x * {i}\n    return y\n" for i in range(1500))
    text = "import torch\n" + body
    assert await _open(client, path, text) == []
    published: list[types.PublishDiagnosticsParams] = []
    record = client.protocol.fm.features[DIAGNOSTICS]  # pytest-lsp's own handler, kept

    def count(params: types.PublishDiagnosticsParams) -> None:
        published.append(params)
        record(params)

    client.protocol.fm.features[DIAGNOSTICS] = count
    for version in range(2, 22):  # twenty keystrokes in a burst
        text = text.replace(f"f{version}(x):\n    with torch.no_grad():", f"f{version}(x):\n    with torch.no_grad:", 1)
        await _change(client, path, text, version)
    result = await client.text_document_hover_async(
        types.HoverParams(types.TextDocumentIdentifier(_uri(path)), types.Position(0, 0))
    )
    assert result is None  # it answers while edits are pending
    await client.wait_for_notification(DIAGNOSTICS)
    assert len(published) < 20  # the burst is not checked keystroke by keystroke
    assert published[-1].version == 21 and len(published[-1].diagnostics) == 20


@pytest.mark.asyncio
async def test_notebook_cells_are_checked_together(client: LanguageClient, tmp_path: Path):
    notebook_uri = _uri(tmp_path / "nb.ipynb")
    texts = [
        "import torch\nwith torch.enable_grad:\n    z = torch.ones(1) * 3\n",
        "# notes",
        "with torch.no_grad:\n    y = torch.ones(1) * 2\n",
    ]
    kinds = [types.NotebookCellKind.Code, types.NotebookCellKind.Markup, types.NotebookCellKind.Code]
    cell_uris = [f"{notebook_uri}#cell{i}" for i in range(3)]
    client.notebook_document_did_open(
        types.DidOpenNotebookDocumentParams(
            notebook_document=types.NotebookDocument(
                uri=notebook_uri,
                notebook_type="jupyter-notebook",
                version=1,
                cells=[types.NotebookCell(kind=k, document=u) for k, u in zip(kinds, cell_uris)],
            ),
            cell_text_documents=[
                types.TextDocumentItem(u, "python" if k == types.NotebookCellKind.Code else "markdown", 1, t)
                for u, k, t in zip(cell_uris, kinds, texts)
            ],
        )
    )
    while cell_uris[2] not in client.diagnostics:
        await client.wait_for_notification(DIAGNOSTICS)
    (diagnostic,) = client.diagnostics[cell_uris[2]]  # the import in cell 1 counts in cell 3
    assert diagnostic.code == "GF101" and diagnostic.range.start.line == 0
    assert [(d.code, d.range.start.line) for d in client.diagnostics[cell_uris[0]]] == [("GF101", 1)]
    result = await client.text_document_code_action_async(
        types.CodeActionParams(
            types.TextDocumentIdentifier(cell_uris[2]), _whole(texts[2]), types.CodeActionContext(diagnostics=[], only=["source.fixAll"])
        )
    )
    (fix_all,) = result
    fixed = "with torch.no_grad():\n    y = torch.ones(1) * 2\n"
    assert _apply(texts[2], fix_all.edit.changes[cell_uris[2]]) == fixed
    assert "enable_grad():" in _apply(texts[0], fix_all.edit.changes[cell_uris[0]])  # every cell
    result = await client.text_document_code_action_async(
        types.CodeActionParams(
            types.TextDocumentIdentifier(cell_uris[2]), diagnostic.range, types.CodeActionContext(diagnostics=[diagnostic])
        )
    )
    (quick,) = [a for a in result if a.kind == types.CodeActionKind.QuickFix]
    assert quick.title.startswith("GF101:") and list(quick.edit.changes) == [cell_uris[2]]  # this finding only
    assert _apply(texts[2], quick.edit.changes[cell_uris[2]]) == fixed


@pytest.mark.asyncio
async def test_quick_fix_on_a_line_with_non_ascii_text_of_a_latin1_file(client: LanguageClient, tmp_path: Path):
    # The fixer reads the buffer as its file's bytes: encoded as the coding line says, or the
    # columns after "é" would be off by one and the fix skipped.
    text = (
        "# -*- coding: latin-1 -*-\nimport torch\n\n\ndef f(crit, out, t):\n"
        "    loss = crit(out, t)\n    print(\"é\", loss.data[0])\n"
    )
    path = tmp_path / "legacy.py"
    (diagnostic,) = await _open(client, path, text)
    assert diagnostic.code == "GF403"
    (quick,) = [a for a in await _actions(client, path, diagnostic.range) if a.kind == types.CodeActionKind.QuickFix]
    (edit,) = quick.edit.changes[_uri(path)]
    assert _apply(text, [edit]) == text.replace("loss.data[0]", "loss.item()")


@pytest.mark.asyncio
async def test_an_edited_pyproject_applies_from_the_next_save(client: LanguageClient, tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text("[tool.gradfix]\n")
    path = tmp_path / "m.py"
    assert [d.code for d in await _open(client, path, BUGGY)] == ["GF101"]
    (tmp_path / "pyproject.toml").write_text('[tool.gradfix]\nignore = ["GF101"]\n')
    client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(_uri(path))))
    await client.wait_for_notification(DIAGNOSTICS)
    assert list(client.diagnostics[_uri(path)]) == []
    (tmp_path / "pyproject.toml").write_text('[tool.gradfix]\nselct = ["GF1"]\n')  # a typo: said once, no crash
    client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(_uri(path))))
    await client.wait_for_notification(types.WINDOW_SHOW_MESSAGE)
    assert any("unknown key(s) selct" in m.message for m in client.messages)
