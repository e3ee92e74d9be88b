"""PyTorch facts GF203 (save-in-grad-context) relies on, checked on real torch."""

import io

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn


def _bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.ReLU(), nn.Linear(3, 1))
    model(torch.randn(5, 4)).sum().backward()  # params have .grad, buffers were updated
    return model


@pytest.mark.parametrize("context", [torch.no_grad, torch.enable_grad, torch.inference_mode])
def test_saving_a_state_dict_inside_a_grad_context_gives_identical_bytes(context):
    # The article's §6.2 "wrong way" is harmless: hoisting the save is clarity, not a bug fix.
    model = _model()
    outside = _bytes(model.state_dict())
    with context():
        inside = _bytes(model.state_dict())
    assert inside == outside


def test_saving_a_checkpoint_dict_inside_no_grad_gives_identical_files(tmp_path):
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    opt.step()
    weight = model[0].weight

    def checkpoint():
        return {"model": model.state_dict(), "opt": opt.state_dict(), "epoch": 3, "w": weight}

    # Same file name in three folders: the zip archive inside a .pt file is named after it.
    paths = [tmp_path / d / "model.pth" for d in ("outside", "no_grad", "set_grad_enabled")]
    for p in paths:
        p.parent.mkdir()
    torch.save(checkpoint(), paths[0])
    with torch.no_grad():
        torch.save(checkpoint(), paths[1])
    with torch.set_grad_enabled(False):
        torch.save(checkpoint(), paths[2])
    outside = paths[0].read_bytes()
    assert paths[1].read_bytes() == outside
    assert paths[2].read_bytes() == outside


def test_but_a_tensor_computed_in_the_save_call_depends_on_the_grad_mode():
    # Why GF203 only hoists saves whose arguments compute nothing: an expression evaluated
    # as the argument (here w * 2) records a graph outside no_grad and saves differently.
    w = torch.ones(2, requires_grad=True)
    with torch.no_grad():
        inside = _bytes(w * 2)
    outside = _bytes(w * 2)
    assert inside != outside
    assert torch.load(io.BytesIO(outside)).requires_grad
    assert not torch.load(io.BytesIO(inside)).requires_grad


# How the finding reads (scripts/mutate.py found the fix title unpinned).
def _findings(code: str):
    from gradfix import Settings, check

    return check(code, settings=Settings(select=("GF203",)))


def test_a_save_alone_in_its_block_is_fixed_by_removing_the_block():
    [finding] = _findings("import torch\nwith torch.no_grad():\n    torch.save(sd, 'm.pth')\n")
    assert (finding.span.line, finding.span.col) == (3, 4)
    assert finding.fix_title == "Remove the block, keep its statements"


def test_a_save_after_tensor_work_is_fixed_by_moving_it_after_the_block():
    [finding] = _findings("import torch\nwith torch.no_grad():\n    acc = score(model)\n    torch.save(sd, 'm.pth')\n")
    assert (finding.span.line, finding.span.col) == (4, 4)
    assert finding.fix_title == "Move the save after the block"
    assert finding.message == "`torch.save` inside `with torch.no_grad():` (line 2) writes the same file in any grad mode"
