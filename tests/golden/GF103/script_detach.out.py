# The article's example (section 6.1), as a top-level script.
import torch
import torch.nn as nn

model = nn.ModuleDict({"encoder": nn.Linear(10, 4), "decoder": nn.Linear(4, 1)})
optimizer = torch.optim.SGD(model["decoder"].parameters(), lr=0.01)

inputs = torch.randn(5, 10)
labels = torch.randn(5, 1)

# not recommended
hidden = model["encoder"](inputs)
outputs = model["decoder"](hidden.detach())  # the decoder cannot compute grads here either
loss = nn.MSELoss()(outputs, labels)
loss.backward()
optimizer.step()
