import os

import torch
from torch import save as torch_save


def validate(model, optimizer, loader, epoch, ckpt_dir, best_acc):
    model.eval()
    correct = 0
    with torch.set_grad_enabled(False):  # validation
        for images, labels in loader:
            correct += (model(images).argmax(dim=1) == labels).sum().item()
        acc = correct / len(loader.dataset)
        # keep the latest weights and optimizer state
        torch_save({"epoch": epoch,
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "acc": acc},
                   os.path.join(ckpt_dir, f"epoch_{epoch:03d}.pth"))
        torch_save(model.state_dict(), os.path.join(ckpt_dir, "last.pth"))   # for resuming
    if acc > best_acc:
        with torch.no_grad():
            torch.save(model.state_dict(), os.path.join(ckpt_dir, "best.pth"))
            model.load_state_dict(torch.load(os.path.join(ckpt_dir, "ema.pth")))
    return acc


def export(model, path):
    with torch.no_grad():
        scripted = torch.jit.trace(model, torch.randn(1, 3, 224, 224))
        torch.save(model(torch.randn(1, 3, 224, 224)), path + ".sample")  # computes: stays
        torch.jit.save(scripted, path)
    with torch.inference_mode():
        del scripted
        torch.save(model.state_dict(), path + ".pt")
