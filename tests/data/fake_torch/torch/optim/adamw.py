"""The stand-in's torch.optim.AdamW: its state (a step count and two tensors a parameter, as
PyTorch's "step", "exp_avg" and "exp_avg_sq") made at the first step by _init_group, and a
temporary as large as a parameter made and freed at every step, as PyTorch's foreach
implementation does."""
import torch

from .optimizer import Optimizer


class AdamW(Optimizer):
    def __init__(self, params, lr=1e-3):
        super().__init__(params, {"lr": lr})

    def _init_group(self, group):
        for p in group["params"]:
            if p not in self.state:
                self.state[p] = {"step": 0, "exp_avg": torch.empty(p.nbytes, device="cuda"),
                                 "exp_avg_sq": torch.empty(p.nbytes, device="cuda")}

    def step(self, closure=None):
        for group in self.param_groups:
            self._init_group(group)
            for p in group["params"]:
                self.state[p]["step"] += 1
                update = torch.empty(p.nbytes, device="cuda")
                del update
