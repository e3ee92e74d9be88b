# The article's §3.2 example moved into a function: the default style extracts a helper.
import torch


def demo():
    with torch.set_grad_enabled(False):
        # 外层禁用梯度
        torch.set_grad_enabled(True)  # 全局启用
        x = torch.randn(3, requires_grad=True)
        y = x * 2
        print(y.grad_fn)  # 现在有梯度了
        torch.set_grad_enabled(False)  # 恢复原状
    return y
