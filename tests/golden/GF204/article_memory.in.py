# The article's §5.3 "memory optimisation" example, verbatim.
import torch

# 只在必要的时候保留梯度
with torch.set_grad_enabled(True):
    outputs = model(inputs)
    loss = compute_loss(outputs)
    loss.backward()

# 立即释放不需要的中间变量
with torch.set_grad_enabled(False):
    del outputs, loss
    torch.cuda.empty_cache()
