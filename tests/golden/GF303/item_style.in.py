# golden: GF303.style=item
import torch


def train(model, loader, optimizer, log_every=100):
    total = 0.0
    for i, (x, y) in enumerate(loader):
        loss = model.loss(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss
        if i % log_every == 0:
            print(total / (i + 1))
