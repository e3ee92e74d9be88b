import torch as T


def generate(model, prompt, steps):
    with T.no_grad():  # sampling only
        for _ in range(steps):
            logits = model(prompt)[:, -1]
            prompt = T.cat([prompt, logits.argmax(-1, keepdim=True)], dim=1)
        return prompt


def score(model, x, torch):
    # `torch` here is a parameter, not the module
    with torch.no_grad():
        return model(x)
