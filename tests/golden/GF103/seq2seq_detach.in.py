import torch
import torch.nn as nn


class Seq2SeqTrainer:
    """Fine-tunes the decoder on top of a pretrained, frozen encoder."""

    def __init__(self, model, optimizer, device="cuda"):
        self.model = model
        self.optimizer = optimizer
        self.criterion = nn.CrossEntropyLoss(ignore_index=0)
        self.device = device

    def train_epoch(self, loader):
        self.model.train()
        total = 0.0
        for step, (src, tgt) in enumerate(loader):
            src, tgt = src.to(self.device), tgt.to(self.device)

            # the encoder is pretrained: don't waste memory on its graph
            with torch.no_grad():  # frozen encoder
                memory = self.model.encoder(src)
                logits = self.model.decoder(
                    tgt[:, :-1],
                    memory,      # cross-attention
                    memory_mask=memory.ne(0).any(-1),
                )
            loss = self.criterion(logits.reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1))

            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            total += loss.item()
        return total / max(step + 1, 1)

    def evaluate(self, loader):
        self.model.eval()
        with torch.no_grad():
            memory = self.model.encoder(loader.src)
            logits = self.model.decoder(loader.tgt, memory)
        return logits.argmax(-1)
