# Feature-extraction fine-tuning, 2019 style: the encoder is frozen by toggling grad mode.
import torch as T
import torch.nn as nn


class Classifier(nn.Module):
    def __init__(self, encoder, n_classes):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(512, n_classes)

    def forward(self, images):
        # the encoder is frozen: no graph for it
        T.set_grad_enabled(False)
        feats = self.encoder(images)
        # back to normal
        T.set_grad_enabled(True)
        return self.head(feats)

    @staticmethod
    def embed(encoder, images):
        """Embeddings for the retrieval index."""
        T.set_grad_enabled(False)  # inference only
        return encoder(images).flatten(1)


def fit(model, loader, optimizer, criterion):
    for images, targets in loader:
        T.autograd.set_grad_enabled(False)
        images = augment(images)
        T.autograd.set_grad_enabled(True)

        optimizer.zero_grad()
        loss = criterion(model(images), targets)
        loss.backward()
        optimizer.step()
    return loss.item()


def predict(model, images, train_mode):
    T.set_grad_enabled(train_mode)
    return model(images)
