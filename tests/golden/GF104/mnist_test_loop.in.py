# Legacy MNIST example: test() forgets model.eval(), so dropout stays on while scoring.
from __future__ import print_function

import torch as T
import torch.nn as nn
import torch.nn.functional as F
from torch import no_grad


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.fc1 = nn.Linear(784, 128)
        self.drop = nn.Dropout(0.5)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        # caller owns the mode here: never touched
        with T.no_grad():
            x = x.view(-1, 784)
        return self.fc2(self.drop(F.relu(self.fc1(x))))


model = Net()
optimizer = T.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)


def train(epoch, loader):
    model.train()
    for batch_idx, (data, target) in enumerate(loader):
        optimizer.zero_grad()
        output = model(data)
        loss = F.cross_entropy(output, target)
        loss.backward()
        optimizer.step()


def test(loader):
    test_loss = 0
    correct = 0

    # no graph needed while scoring
    with no_grad():
        for data, target in loader:
            output = model(data)
            test_loss += F.cross_entropy(output, target, reduction='sum').item()  # sum up batch loss
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    test_loss /= len(loader.dataset)
    print('Test set: Average loss: {:.4f}, Accuracy: {}/{}'.format(
        test_loss, correct, len(loader.dataset)))


@T.no_grad()
def predict(batch):
    """Class indices for one batch."""
    return model(batch).argmax(1)


def report(loader):
    # the enclosing function switches the mode before the helper runs: not GF104
    def score():
        with T.no_grad():
            return sum(model(x).argmax(1).eq(y).sum().item() for x, y in loader)
    model.eval()
    return score()


def evaluate_ignored(loader):
    with T.no_grad():  # gradfix: ignore[GF104]
        return [model(x) for x, _ in loader]
