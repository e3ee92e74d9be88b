# Article §3.2 "正确的嵌套姿势": the toggle hack inside a grad-disabled block.
import torch

with torch.set_grad_enabled(False):
    # 外层禁用梯度
    with torch.enable_grad():  # 全局启用
        x = torch.randn(3, requires_grad=True)
        y = x * 2
        print(y.grad_fn)  # 现在有梯度了
    # 恢复原状
