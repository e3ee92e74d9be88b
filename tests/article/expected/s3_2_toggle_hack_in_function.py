# Article §3.2 advice: "extract the part that needs gradients into its own function".
import torch


@torch.enable_grad()  # 全局启用
def _feats_with_grad(feats, model):
    feats = feats.detach().requires_grad_(True)
    score = model.head(feats).sum()
    score.backward()
    return feats


def saliency(model, images):
    with torch.set_grad_enabled(False):
        feats = model.backbone(images)
        feats = _feats_with_grad(feats, model)  # 恢复原状
        return feats.grad.abs()
