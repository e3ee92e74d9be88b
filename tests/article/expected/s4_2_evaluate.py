# Article §4.2 / §2.1: train with model.train(), evaluate under a grad-disabled block,
# but the evaluation forgot model.eval() (dropout and batch-norm still in training mode).
import torch


def train_one_epoch(model, dataloader, optimizer, compute_loss):
    model.train()
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
            # 这里不会计算梯度，节省内存
