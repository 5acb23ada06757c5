"""The stand-in's torch.optim.AdamW: its state (two tensors a parameter) made at the first step by
_init_group, and a temporary as large as a parameter made and freed at every step, as PyTorch's
foreach implementation does."""
import torch

from .optimizer import Optimizer


class AdamW(Optimizer):
    def __init__(self, params, lr=1e-3):
        super().__init__(params, {"lr": lr})

    def _init_group(self, group):
        for p in group["params"]:
            if id(p) not in self.state:
                self.state[id(p)] = (torch.empty(p.nbytes, device="cuda"), torch.empty(p.nbytes, device="cuda"))

    def step(self):
        for group in self.param_groups:
            self._init_group(group)
            for p in group["params"]:
                update = torch.empty(p.nbytes, device="cuda")
                del update
