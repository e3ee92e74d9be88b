# Aliases of torch.autograd.Variable; odd spacing and comments are kept.
import torch as T
import torch.autograd as ag


def predict(net, images, volatile_flag=True):
    x = T.autograd.Variable(images.float() / 255.0, volatile=True)  # 0.3 inference
    h = ag.Variable(  x.new(1, 8).zero_(), volatile=volatile_flag)
    y = ag.Variable(x + 1, volatile=False)
    return net(x, h), y


def shadowed(torch, images):
    # `torch` here is a parameter, not the module: left alone
    return torch.autograd.Variable(images, volatile=True)
