# A typical 2018 training script: model.train() once, evaluation inside the epoch loop.
import torch
import torch.nn as nn
import torch.optim as optim

net = nn.Sequential(nn.Linear(20, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 2))
criterion = nn.CrossEntropyLoss()
optimizer = optim.SGD(net.parameters(), lr=0.1)
scheduler = optim.lr_scheduler.StepLR(optimizer, step_size=10)


def validate(model, loader):
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
    return correct / len(loader.dataset)


def fit(model, train_loader, val_loader, epochs=10):
    model.train()
    best = 0.0
    for epoch in range(epochs):
        model.train()
        # --- train ---
        for i, (x, y) in enumerate(train_loader):
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
        scheduler.step()
        # --- validate ---
        acc = validate(model, val_loader)
        best = max(best, acc)
    return best


def train_one_epoch(model, loader):
    """One pass over the data (the caller below evaluates between epochs)."""
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()


def main(train_loader, val_loader):
    for epoch in range(3):
        train_one_epoch(net, train_loader)
        print(epoch, validate(net, val_loader))


def finetune_frozen_bn(model, loader):
    # batch-norm statistics frozen on purpose: eval-mode training, left alone
    model.eval()
    for x, y in loader:
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()


def fit_ok(model, loader, val_loader):
    for epoch in range(3):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
        validate(model, val_loader)
