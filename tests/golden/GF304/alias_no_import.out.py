from torch import nn as tnn
import torch as T


def reset_parameters(self):
    stdv = 1.0 / self.hidden_size ** 0.5
    with T.no_grad():
        for weight in self.parameters():
            weight.uniform_(-stdv, stdv)
        self.bias.zero_()  # already grad-disabled: only `.data` goes
