"""Import spellings of Variable, a try/except import, and look-alikes that must stay."""
try:
    from torch.autograd import Variable
except ImportError:  # very old installs
    Variable = None
import torch.autograd as ag
from tensorflow import Variable as TFVariable


def to_input(x, y):
    return Variable(x), ag.Variable(y)


def make_tf_weight(shape):
    # a TensorFlow Variable is not torch's: left alone
    return TFVariable(shape)


class Wrapper:
    def forward(self, Variable, x):
        # parameter named Variable shadows the import: left alone
        return Variable(x)
