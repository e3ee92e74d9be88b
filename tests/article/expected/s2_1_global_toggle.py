# Article §2.1: a bare global toggle at the top of the training function.
import torch


def train_one_epoch(model, dataloader, optimizer, compute_loss):
    model.train()
    with torch.enable_grad():
        for inputs, labels in dataloader:
            optimizer.zero_grad()
            outputs = model(inputs)
            loss = compute_loss(outputs, labels)
            loss.backward()
            optimizer.step()
