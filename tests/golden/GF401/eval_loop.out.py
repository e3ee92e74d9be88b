"""Evaluation written for PyTorch 0.3: `volatile=True` was how you turned the graph off."""
import torch
import torch.nn.functional as F
from torch.autograd import Variable


def test(model, test_loader, use_cuda=False):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            if use_cuda:
                data, target = data.cuda(), target.cuda()
            # no graph for evaluation
            data, target = data, Variable(target)
            output = model(data)
            test_loss += F.nll_loss(output, target, size_average=False).item()
            pred = output.max(1, keepdim=True)[1]
            correct += pred.eq(target.view_as(pred)).sum().item()
    return test_loss / len(test_loader.dataset), correct


def get_batch(source, i, bptt, evaluation=False):
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i:i + seq_len].detach()
    return data, source[i + 1:i + 1 + seq_len].view(-1)


def frozen_copy(weights):
    # volatile and requires_grad both true: raises ValueError today, reported only
    return Variable(weights, requires_grad=True, volatile=True)
