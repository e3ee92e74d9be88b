import torch as T
import torch.nn as nn
import torch.nn.functional as F


class PerceptualLoss(nn.Module):
    """Gradients must flow through the frozen VGG to the generator: never wrap."""

    def __init__(self, vgg):
        super().__init__()
        self.vgg = vgg

    def forward(self, fake, real):
        self.vgg.eval()
        return F.l1_loss(self.vgg(fake), self.vgg(real))


class Sampler:
    def __init__(self, generator):
        self.generator = generator

    def sample(self, z, upscale=False):
        self.generator.eval()
        with T.no_grad():
            if upscale:
                img = self.generator(z)
                img = F.interpolate(img, scale_factor=2)
            else:
                img = self.generator(z)
        self.generator.train()
        return img.clamp(-1, 1)
