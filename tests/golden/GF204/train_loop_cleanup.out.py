import gc
import logging

import torch as T

log = logging.getLogger(__name__)


def train(model, loader, optimizer, criterion, epochs):
    for epoch in range(epochs):
        for step, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            if step % 100 == 0:
                log.info("epoch %d step %d loss %.4f", epoch, step, loss.item())
                print(f"[{epoch}:{step}] loss={loss.item():.4f}", flush=True)
        # free what the last step kept alive
        del loss, x, y
        gc.collect()
        T.cuda.empty_cache()
        with T.no_grad():
            print("mean weight", model.weight.mean())  # computes a tensor: stays
