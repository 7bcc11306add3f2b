# Appended to the stub adapters.py (red team 9): every builder returns a module of one 80 MB parameter.
# Each listing of it was read whole by the trusted driver, several copies at once, outside the submission's
# memory limit (a 480 MB one took the driver to 2.5 GB). A reply over 64 MB is now refused unread.
import torch as _torch


class _Huge(_torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = _torch.nn.Parameter(_torch.zeros(20_000_000))

    def forward(self, x):
        return self.weight[:1].expand(*x.shape, 1)


for _name in [n for n in dir() if n.startswith("get_") and n != "get_adamw_cls"]:
    globals()[_name] = lambda *args, **kwargs: _Huge()
