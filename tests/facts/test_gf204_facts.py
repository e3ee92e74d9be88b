"""PyTorch facts GF204 (empty-grad-context) relies on, checked on real torch."""

import gc
import io
import logging

import pytest

torch = pytest.importorskip("torch")


def _graph():
    x = torch.ones(3, requires_grad=True)
    out = (x * 2).sum()
    return x, out


@pytest.mark.parametrize("context", [torch.no_grad, torch.enable_grad, torch.inference_mode])
def test_del_and_empty_cache_do_the_same_inside_a_grad_context(context):
    # The body of the article's §5.3 block (del + empty_cache + gc.collect) does no autograd
    # work: freeing a graph's tensors does the same in any grad mode.
    import weakref

    x, out = _graph()
    ref = weakref.ref(out)
    mode = torch.is_grad_enabled()
    with context():
        del out
        torch.cuda.empty_cache()  # a no-op without CUDA; never records anything
        gc.collect()
    assert ref() is None
    assert torch.is_grad_enabled() is mode
    assert x.grad is None


def test_printing_a_computed_tensor_is_not_grad_independent(capsys):
    # Why GF204 only accepts print/log arguments that compute nothing (names, constants,
    # .item(), f-strings of those): a tensor computed in the call prints its grad_fn.
    x = torch.ones(2, requires_grad=True)
    with torch.no_grad():
        print(x * 2)
    inside = capsys.readouterr().out
    print(x * 2)
    outside = capsys.readouterr().out
    assert inside != outside
    assert "grad_fn" in outside


def test_printing_and_logging_names_and_items_is_grad_independent(capsys, caplog):
    y = (torch.ones(2, requires_grad=True) * 3).sum()
    log = logging.getLogger("gf204")

    def emit():
        print(y, f"{y.item():.3f}", y.shape)
        with caplog.at_level(logging.INFO, logger="gf204"):
            log.info("loss %s %s", y, y.item())
        return capsys.readouterr().out, [r.getMessage() for r in caplog.records]

    outside = emit()
    caplog.clear()
    with torch.no_grad():
        inside = emit()
    assert inside == outside


def test_saving_is_not_part_of_gf204():
    # torch.save in a grad block belongs to GF203; keep the byte-identity there.
    buf1, buf2 = io.BytesIO(), io.BytesIO()
    t = torch.ones(2)
    torch.save(t, buf1)
    with torch.no_grad():
        torch.save(t, buf2)
    assert buf1.getvalue() == buf2.getvalue()


def test_the_finding_covers_the_block_and_offers_to_unwrap_it():
    from gradfix import Settings, check, fix

    code = "import torch\nwith torch.no_grad():\n    del x\n    print('done')\n"
    settings = Settings(select=("GF204",))
    [finding] = check(code, settings=settings)
    assert (finding.span.line, finding.span.col, finding.span.end_line) == (2, 0, 4)
    assert finding.message == "`with torch.no_grad():` wraps no tensor computation (only del/pass/cleanup/logging)"
    assert finding.fix_title == "Remove the block, keep its statements"
    assert fix(code, settings=settings) == "import torch\ndel x\nprint('done')\n"
