# Article §6.1 "不要过度使用no_grad": frozen encoder and trainable decoder both in no_grad.
import torch


def train_step(model, inputs, targets, criterion, optimizer):
    optimizer.zero_grad()
    # 不推荐
    with torch.no_grad():
        hidden = model.encoder(inputs)
        outputs = model.decoder(hidden)  # 这里decoder也无法计算梯度了
    loss = criterion(outputs, targets)
    loss.backward()
    optimizer.step()
    return loss.item()
