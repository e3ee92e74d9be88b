# The article's §3.2 example moved into a function: the default style extracts a helper.
import torch


@torch.enable_grad()  # 全局启用
def _y_with_grad():
    x = torch.randn(3, requires_grad=True)
    y = x * 2
    print(y.grad_fn)  # 现在有梯度了
    return y


def demo():
    with torch.set_grad_enabled(False):
        # 外层禁用梯度
        y = _y_with_grad()  # 恢复原状
    return y
