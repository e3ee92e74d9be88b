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
        with T.no_grad():
            feats = self.encoder(images)
        # back to normal
        return self.head(feats)

    @staticmethod
    @T.no_grad()  # inference only
    def embed(encoder, images):
        """Embeddings for the retrieval index."""
        return encoder(images).flatten(1)


def fit(model, loader, optimizer, criterion):
    for images, targets in loader:
        with T.autograd.no_grad():
            images = augment(images)

        optimizer.zero_grad()
        loss = criterion(model(images), targets)
        loss.backward()
        optimizer.step()
    return loss.item()


def predict(model, images, train_mode):
    with T.set_grad_enabled(train_mode):
        return model(images)
