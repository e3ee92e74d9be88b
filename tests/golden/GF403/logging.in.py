"""Loss logging from a PyTorch 0.3 training loop: `.data[0]` read the loss value."""
import torch
import torch.nn as nn
import torch.nn.functional as F


def train(model, loader, optimizer, epoch, log_interval=10):
    criterion = nn.CrossEntropyLoss()
    running = 0.0
    for batch_idx, (data, target) in enumerate(loader):
        optimizer.zero_grad()
        output = model(data)
        loss = criterion(output, target)
        loss.backward()
        optimizer.step()
        running += loss.data[0]
        if batch_idx % log_interval == 0:
            print('Train Epoch: {} [{}/{}]\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), len(loader.dataset), loss.data[0]))
            print(f"first logit {output.data[0][0]:.3f}")  # a real tensor: left alone
    return running / len(loader)


def evaluate(model, loader):
    total, hard = 0.0, []
    per_sample = nn.CrossEntropyLoss(reduction='none')
    for data, target in loader:
        output = model(data)
        total += F.cross_entropy(output, target).data[0]
        token_loss = per_sample(output, target)
        hard.append(token_loss.data[0])  # first sample's loss: left alone
        mse = ((output - output.mean()) ** 2).mean()
        print(f"spread {mse.data[0]:.4f}")
    return total, hard


def gan_step(netD, netG, real, noise, crit):
    errD_real = crit(netD(real), torch.ones(real.size(0)))
    errD_fake = crit(netD(netG(noise).detach()), torch.zeros(real.size(0)))
    errD = errD_real + errD_fake
    print('Loss_D: %.4f' % errD.data[0])
    return errD
