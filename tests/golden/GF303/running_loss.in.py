import torch
import torch.nn.functional as F


def train(model, loader, optimizer, scaler, epochs):
    for epoch in range(epochs):
        running_loss = 0.0
        seen = 0
        for step, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            with torch.autocast("cpu"):
                loss = F.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            running_loss += loss  # kept every step's graph
            seen = seen + x.size(0)
        print(f"epoch {epoch}: {running_loss / (step + 1):.4f}")


def train_accumulate(model, loader, optimizer, accum):
    """Gradient accumulation: the sum IS backpropagated; must stay as it is."""
    total = 0
    for i, (x, y) in enumerate(loader):
        total += F.cross_entropy(model(x), y) / accum
        if (i + 1) % accum == 0:
            total.backward()
            optimizer.step()
            optimizer.zero_grad()
            total = 0


def fit(loader, train_step):
    loss_avg = 0.0
    for batch in loader:
        loss = train_step(batch)  # a float
        loss_avg += loss
    return loss_avg / len(loader)


def train_weighted(model, loader, optimizer):
    epoch_loss = 0
    for x, y in loader:
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        epoch_loss = epoch_loss + loss * x.size(0)
    return epoch_loss / len(loader.dataset)
