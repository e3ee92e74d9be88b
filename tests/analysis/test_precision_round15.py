"""The false findings, missed findings and awkward rewrites of the round-15 sample as first
judged (bench/precision/verdicts15.tsv), one fixture per shape, written for these tests: the
facts each one showed to be wrong, corrected in the shared analysis for every rule."""

from __future__ import annotations

import textwrap

from gradfix import Settings, check, fix

GF104 = Settings(select=("GF104",), unsafe_fixes=True)
GF105 = Settings(select=("GF105",), unsafe_fixes=True)
GF303 = Settings(select=("GF303",))


def _codes(source: str, settings: Settings) -> list[tuple[str, int]]:
    return [(f.code, f.line) for f in check(textwrap.dedent(source), "<string>", settings=settings)]


# -- a parameter is whatever the file's calls hand it, globals included -----------------------
NOTEBOOK_EVALUATION = """\
import torch
import torch.nn as nn
from transformers import pipeline

bertmodel = pipeline(model="distilbert")


def test(loader, model):
    with torch.no_grad():
        for x in loader:
            out = model(x)


def train(loader, model, opt):
    model.train()
    for x, y in loader:
        loss = model(x).sum()
        loss.backward()
        opt.step()


net = nn.Sequential(nn.Linear(2, 2), nn.Dropout())
opt = torch.optim.SGD(net.parameters(), lr=0.1)
test([], {evaluated})
train([], net, opt)
"""


def test_a_parameter_handed_only_an_untrained_global_is_not_the_trained_namesake():
    # CSCfi's imdb notebook: test(loader, model) runs a transformers pipeline; train()'s own
    # `model` parameter is another object (and a pipeline has no .eval() to insert)
    assert _codes(NOTEBOOK_EVALUATION.format(evaluated="bertmodel"), GF104) == []


def test_a_parameter_handed_a_global_that_a_helper_trains_is_trained():
    assert _codes(NOTEBOOK_EVALUATION.format(evaluated="net"), GF104) == [("GF104", 11)]


# -- the backward of the very value accumulated, not the first backward of its name ------------
GAN_SUMS = """\
import torch

def fit(net_G, net_D, opt_D, opt_G, data):
    for epoch in range(10):
        loss_G = 0
        loss_D = 0
        for real in data:
            loss = -torch.mean(net_D(net_G(real)))
            opt_D.zero_grad()
            loss.backward()
            opt_D.step()
            loss_D += loss

            loss = -torch.mean(net_D(net_G(real)))
            opt_G.zero_grad()
            loss.backward()
            opt_G.step()
            loss_G += loss
        print(loss_D, loss_G)
"""


def test_each_sum_of_a_twice_backwarded_name_keeps_its_own_graphs():
    # dataflowr's double-moon GAN: `loss_D += loss` was missed because the first backward of
    # `loss` found in the file was the generator's, rebound in between
    assert _codes(GAN_SUMS, GF303) == [("GF303", 12), ("GF303", 18)]


# -- a caller that hands on its own parameter hands what its callers give ----------------------
CHATBOT = """\
import torch
import torch.nn as nn


def train(x, encoder, decoder, enc_opt, dec_opt):
    enc_opt.zero_grad()
    dec_opt.zero_grad()
    loss = decoder(encoder(x)).sum()
    loss.backward()
    enc_opt.step()
    dec_opt.step()


def train_iters(batches, encoder, decoder, enc_opt, dec_opt):
    for x in batches:
        train(x, encoder, decoder, enc_opt, dec_opt)


encoder = nn.Sequential(nn.Linear(2, 2), nn.Dropout())
decoder = nn.Sequential(nn.Linear(2, 2), nn.Dropout())
enc_opt = torch.optim.Adam(encoder.parameters())
dec_opt = torch.optim.Adam(decoder.parameters())
encoder.{mode}()
decoder.{mode}()
train_iters([], encoder, decoder, enc_opt, dec_opt)
encoder.eval()
decoder.eval()
"""


def test_training_reached_only_through_a_caller_after_train_is_in_train_mode():
    # Fast-Pytorch's chatbot: the script sets train mode, calls train_iters, then evaluates
    assert _codes(CHATBOT.format(mode="train"), GF105) == []


def test_training_reached_through_a_caller_after_eval_is_reported():
    assert [code for code, _ in _codes(CHATBOT.format(mode="eval"), GF105)] == ["GF105"]


# -- provenance: what carries no graph ----------------------------------------------------------
GF402 = Settings(select=("GF402",), unsafe_fixes=True)


def _fixed(source: str, settings: Settings = GF402) -> str:
    source = textwrap.dedent(source)
    fixed = fix(source, "<string>", settings=settings)
    compile(fixed, "<fixed>", "exec")
    assert fix(fixed, "<string>", settings=settings) == fixed  # idempotent
    return fixed


def test_a_comparison_is_a_bool_tensor_and_its_cast_carries_no_graph():
    # torchMoji's attention mask: `Variable((idxes < lengths.unsqueeze(1)).float())`
    fixed = _fixed(
        """\
        from torch.autograd import Variable

        def mask(idxes, lengths):
            return Variable((idxes < lengths.unsqueeze(1)).float())
        """
    )
    assert "    return (idxes < lengths.unsqueeze(1)).float()\n" in fixed, fixed


def test_a_comprehension_over_a_loader_unpacks_batches():
    # torchMoji's validation loss: `[loss(model(Variable(xv)), Variable(yv)) for xv, yv in val_gen]`
    fixed = _fixed(
        """\
        from torch.autograd import Variable

        def validate(model, loss_op, val_gen):
            return [loss_op(model(Variable(xv)), Variable(yv)).item() for xv, yv in val_gen]
        """
    )
    assert "[loss_op(model(xv), yv).item() for xv, yv in val_gen]" in fixed, fixed


def test_a_batch_unpacked_from_a_generator_split_is_a_batch():
    fixed = _fixed(
        """\
        from torch.autograd import Variable

        def fit(model, train_gen):
            for i, data in enumerate(train_gen):
                x, y = data
                x = Variable(x, requires_grad=False)
                model(x, y).backward()
        """
    )
    assert "Variable" not in fixed and "x = x" not in fixed and ".detach()" not in fixed, fixed


LEGACY_ALIASES = """\
import numpy as np
import torch
from torch.autograd import Variable

cuda = torch.cuda.is_available()
Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor
LongTensor = torch.cuda.LongTensor if cuda else torch.LongTensor


def sample_z(n, req_grad=False):
    Tensor = torch.cuda.FloatTensor
    return Variable(Tensor(np.random.normal(0, 1, (n, 8))), requires_grad=req_grad)


def step(opt, n):
    valid = Variable(Tensor(n, 1).fill_(1.0), requires_grad=False)
    labels = Variable(LongTensor(n).fill_(opt.num_classes), requires_grad=False)
    return valid, labels
"""


def test_a_local_alias_of_a_legacy_class_builds_fresh_tensors_and_hides_no_global_one():
    # PyTorch-GAN's clustergan: `Tensor = torch.cuda.FloatTensor` in sample_z, the module's own
    # conditional alias elsewhere; sgan's `LongTensor(n).fill_(opt.num_classes)` is an integer tensor
    fixed = _fixed(LEGACY_ALIASES)
    assert "    return Tensor(np.random.normal(0, 1, (n, 8))).requires_grad_(req_grad)\n" in fixed, fixed
    assert "    valid = Tensor(n, 1).fill_(1.0)\n" in fixed, fixed
    assert "    labels = LongTensor(n).fill_(opt.num_classes)\n" in fixed, fixed


# -- a removed `else:` keeps the blank lines LibCST files under it ------------------------------
def test_removing_a_whole_else_branch_keeps_its_trailing_whitespace_line():
    # Fast-Pytorch's CNN_Mnist: the line "      " after the branch separated it from the step
    source = (
        "from torch.autograd import Variable\n\n"
        "def fit(loader, cuda, model, opt):\n"
        "  for images, labels in loader:\n"
        "    if cuda:\n"
        "      images =Variable(images.cuda())\n"
        "    else:\n"
        "      images =Variable(images)\n"
        "      \n"
        "    opt.zero_grad()\n"
        "    model(images, labels).backward()\n"
    )
    fixed = fix(source, "<string>", settings=GF402)  # (no dedent: it would blank the line)
    assert fix(fixed, "<string>", settings=GF402) == fixed
    assert fixed == (
        "def fit(loader, cuda, model, opt):\n"
        "  for images, labels in loader:\n"
        "    if cuda:\n"
        "      images =images.cuda()\n"
        "      \n"
        "    opt.zero_grad()\n"
        "    model(images, labels).backward()\n"
    ), fixed


# -- a statement moved into a `with` takes its backslash-continued lines along -----------------
def test_a_backslash_continued_line_moves_one_level_deeper_with_its_statement():
    # distiller's alexnet_batchnorm init: `fan_in, k = (..) if isinstance(..) \` / `else (..)`
    source = (
        "import torch\n\n"
        "def evaluate(model, xs):\n"
        "    model.eval()\n"
        "    for x in xs:\n"
        "        y = model(x) if x is not None \\\n"
        "            else None\n"
        '        s = """a\n'
        'b"""\n'
        "        print(y, s)\n"
        "    model.train()\n"
    )
    settings = Settings(select=("GF302",), unsafe_fixes=True)
    fixed = fix(source, "<string>", settings=settings)
    assert (
        "    with torch.no_grad():\n"
        "        for x in xs:\n"
        "            y = model(x) if x is not None \\\n"
        "                else None\n"
        '            s = """a\n'
        'b"""\n'  # a string's own lines are its value: never re-indented
    ) in fixed, fixed


# -- GF304: writes that need no `no_grad` -----------------------------------------------------
GF304 = Settings(select=("GF304",), unsafe_fixes=True)


def test_a_state_dict_entry_is_written_without_data_and_without_no_grad():
    # LLaVA's apply_delta: one `with` per branch was judged awkward; none is needed
    fixed = _fixed(
        """\
        def apply_delta(base, delta):
            for name, param in delta.state_dict().items():
                if param.data.shape == base.state_dict()[name].shape:
                    param.data += base.state_dict()[name]
                else:
                    bparam = base.state_dict()[name]
                    param.data[:bparam.shape[0]] += bparam
        """,
        GF304,
    )
    assert "            param += base.state_dict()[name]\n" in fixed, fixed
    assert "            param[:bparam.shape[0]] += bparam\n" in fixed, fixed
    assert "no_grad" not in fixed, fixed


def test_a_grad_divided_by_a_def_returning_an_int_needs_no_no_grad():
    # encodec's sync_grad: `p.grad.data /= world_size()`
    fixed = _fixed(
        """\
        import torch

        def world_size():
            if torch.distributed.is_initialized():
                return torch.distributed.get_world_size()
            return 1

        def sync_grad(params):
            for p in params:
                p.grad.data /= world_size()
        """,
        GF304,
    )
    assert "        p.grad /= world_size()\n" in fixed and "no_grad" not in fixed, fixed


# -- more that carries no graph: copies, a batch's rows, transformed images ----------------------
def test_a_clone_is_held_by_no_one_else_so_it_takes_requires_grad_itself():
    # distiller's L1-regularization notebook
    fixed = _fixed(
        """\
        import torch
        from torch.autograd import Variable

        initial_guess = torch.Tensor([8, 5])
        W = Variable(initial_guess, requires_grad=True)
        W_l1 = Variable(initial_guess.clone(), requires_grad=True)
        print(initial_guess, W, W_l1)
        """
    )
    assert "W = initial_guess.detach().requires_grad_()\n" in fixed, fixed  # shares initial_guess
    assert "W_l1 = initial_guess.clone().requires_grad_()\n" in fixed, fixed


def test_the_rows_of_a_batch_drawn_by_hand_are_batches():
    # PyTorch-GAN's bicyclegan/munit sample_images
    fixed = _fixed(
        """\
        import torch
        from torch.autograd import Variable

        def sample_images(generator, val_dataloader, n):
            imgs = next(iter(val_dataloader))
            for img_A, img_B in zip(imgs["A"], imgs["B"]):
                real_A = img_A.view(1, *img_A.shape).repeat(n, 1, 1, 1)
                real_A = Variable(real_A.type(torch.FloatTensor))
                generator(real_A)
        """
    )
    assert "        real_A = real_A.type(torch.FloatTensor)\n" in fixed, fixed


def test_a_torchvision_transform_of_a_pil_image_is_a_fresh_tensor():
    # ESRGAN's test_on_image, Fast-Pytorch's CNN_Visualization, distiller's feature maps
    fixed = _fixed(
        """\
        import torch
        from PIL import Image
        from torchvision import transforms
        from torch.autograd import Variable

        transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.5,), (0.5,))])
        img = Image.open("x.jpg")
        img = transform(img)
        img = img.unsqueeze_(0)
        sample = Variable(img)
        direct = Variable(transform(Image.open("y.jpg").convert("RGB"))).unsqueeze(0)
        of_a_tensor = Variable(transform(torch.rand(3, 4, 4)))
        """
    )
    assert "sample = img\n" in fixed, fixed
    assert 'direct = transform(Image.open("y.jpg").convert("RGB")).unsqueeze(0)\n' in fixed, fixed
    assert "of_a_tensor = transform(torch.rand(3, 4, 4)).detach()\n" in fixed, fixed  # a tensor in: not followed


def test_a_self_assignment_goes_with_a_comment_about_the_wrapper_and_never_stays_as_x_eq_x():
    # Fast-Pytorch's MLP notebook: `x=Variable(x) #Variable initialization`
    fixed = _fixed(
        """\
        import torch
        from torch.autograd import Variable

        x = torch.tensor([1.0])
        y = torch.tensor([2.0])
        x=Variable(x) #Variable initialization
        y=Variable(y)  # keep this note
        print(x, y)
        """
    )
    assert "x=" not in fixed, fixed
    assert "y=y.detach()  # keep this note\n" in fixed, fixed  # the note stays: the exact alias, never `y=y`


def test_what_a_def_of_the_file_returns_is_followed_when_nothing_else_holds_it():
    # PyTorch-GAN's ccgan: apply_random_mask(imgs) returns a clone of the batch, written with -1
    source = """\
        import numpy as np
        from torch.autograd import Variable

        def apply_random_mask(imgs):
            masked = imgs.clone()
            for i, (y, x) in enumerate(np.random.randint(0, 8, (imgs.shape[0], 2))):
                masked[i, :, y:y + 4, x:x + 4] = -1
            return masked

        def keep(imgs, store):
            store.append(imgs)
            return imgs

        def fit(dataloader, model, store):
            for imgs, _ in dataloader:
                masked = apply_random_mask(imgs)
                masked = Variable(masked)
                kept = Variable(keep(imgs, store), requires_grad=True)
                model(masked, kept).backward()
        """
    fixed = _fixed(source)
    assert "masked = masked" not in fixed and "Variable(masked)" not in fixed, fixed
    assert "kept = keep(imgs, store).detach().requires_grad_()" in fixed, fixed  # the list holds it too


# -- an evaluation helper leaves the module it is handed in eval mode, whatever its name -------
SCRIPT_WITH_ACC_CHECK = """\
import torch
import torch.nn as nn

net = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
opt = torch.optim.SGD(net.parameters(), lr=0.1)


def acc_check(model, loader):
    model.eval()
    with torch.no_grad():
        return sum(model(x).sum().item() for x in loader)


for epoch in range(3):
    for x in loader:
        opt.zero_grad()
        net(x).sum().backward()
        opt.step()
    acc = acc_check(net, test_loader)
"""


def test_a_script_that_evaluates_through_a_helper_each_epoch_trains_in_eval_mode_after_the_first():
    # deeplearningzerotoall's ResNet notebook once GF104 put `net.eval()` into acc_check: epochs
    # 2-150 trained with batch norm frozen, and GF105 (matching `.eval()` receivers by name) was silent
    findings = check(SCRIPT_WITH_ACC_CHECK, "<string>", settings=GF105)
    assert [(f.code, f.line) for f in findings] == [("GF105", 17)], findings
    assert "acc_check(net, test_loader)" in findings[0].message
    fixed = fix(SCRIPT_WITH_ACC_CHECK, "<string>", settings=GF105)
    assert "for epoch in range(3):\n    net.train()\n" in fixed, fixed
