# Article §3.2 advice: "extract the part that needs gradients into its own function".
import torch


def saliency(model, images):
    with torch.set_grad_enabled(False):
        feats = model.backbone(images)
        torch.set_grad_enabled(True)  # 全局启用
        feats = feats.detach().requires_grad_(True)
        score = model.head(feats).sum()
        score.backward()
        torch.set_grad_enabled(False)  # 恢复原状
        return feats.grad.abs()
