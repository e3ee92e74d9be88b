"""Training script in the style of the article's §2.1 / §4.2."""
import torch
import torch.nn.functional as F


def compute_loss(outputs, labels):
    return F.cross_entropy(outputs, labels)


def train_one_epoch(model, dataloader, optimizer):
    model.train()
    with torch.enable_grad():
        for inputs, labels in dataloader:
            optimizer.zero_grad()
            outputs = model(inputs)
            loss = compute_loss(outputs, labels)
            loss.backward()
            optimizer.step()


def evaluate(model, dataloader):
    model.eval()
    with torch.set_grad_enabled(False):
        for inputs, labels in dataloader:
            outputs = model(inputs)


def run_epoch(model, train_loader, val_loader, optimizer):
    with torch.enable_grad():   # train
        train_one_epoch(model, train_loader, optimizer)
    with torch.no_grad():  # validate
        evaluate(model, val_loader)


def main(model, loaders, optimizer, epochs):
    for epoch in range(epochs):
        run_epoch(model, loaders["train"], loaders["val"], optimizer)
