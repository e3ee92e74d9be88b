# golden: GF103.style=narrow
"""Linear probe on a pretrained backbone (2019-style training script)."""
import torch
import torch.nn.functional as F
from torch import no_grad


def train_probe(backbone, probe, train_loader, optimizer, epochs=10):
    backbone.eval()
    for epoch in range(epochs):
        for images, targets in train_loader:
            optimizer.zero_grad()
            with no_grad():
                # backbone features, shape (N, C, H, W)
                feats = backbone(images)

                pooled = F.adaptive_avg_pool2d(feats, 1).flatten(1)
                logits = probe(pooled)   # the probe must learn
            loss = F.cross_entropy(logits, targets)
            loss.backward()
            optimizer.step()
        print("epoch", epoch, "loss", loss.item())
