"""The stand-in's torch.autograd.variable: Variable, whose class attribute _execution_engine is
autograd's engine (torch._C._ImperativeEngine), as in PyTorch."""
import torch


class Variable:
    _execution_engine = torch._C._ImperativeEngine()
