# Article §5.3 "内存优化技巧": a grad context around code that computes nothing.
import torch


def step(model, inputs, compute_loss):
    with torch.set_grad_enabled(True):
        outputs = model(inputs)
        loss = compute_loss(outputs)
        loss.backward()

    # 立即释放不需要的中间变量
    with torch.set_grad_enabled(False):
        del outputs, loss
        torch.cuda.empty_cache()
