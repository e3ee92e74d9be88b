# Aliases of torch.autograd.Variable; odd spacing and comments are kept.
import torch as T
import torch.autograd as ag


def predict(net, images, volatile_flag=True):
    x = (images.float() / 255.0).detach()  # 0.3 inference
    h = x.new(1, 8).zero_()
    y = x + 1
    return net(x, h), y


def shadowed(torch, images):
    # `torch` here is a parameter, not the module: left alone
    return torch.autograd.Variable(images, volatile=True)
