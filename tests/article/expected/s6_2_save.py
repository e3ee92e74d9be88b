# Article §6.2 "模型保存时的注意事项": saving inside no_grad.
import torch


def checkpoint(model):
    # 错误做法：可能在no_grad上下文中保存
    torch.save(model.state_dict(), 'model.pth')
