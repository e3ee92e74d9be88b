# The article's §6.2 example, verbatim (its "wrong way" saves byte-identical files).
import torch
import torch.nn as nn

model = nn.Linear(10, 1)

# 错误做法：可能在no_grad上下文中保存
with torch.no_grad():
    torch.save(model.state_dict(), 'model.pth')

# 正确做法：确保在保存前退出no_grad上下文
torch.save(model.state_dict(), 'model.pth')
