"""The stand-in's torch.nn.Parameter: a tensor that requires grad, made from another one (it
takes over that tensor's memory)."""
import torch


class Parameter(torch.Tensor):
    def __init__(self, data, requires_grad=True):  # noqa: super-init-not-called: the memory is data's
        self.__dict__.update(data.__dict__)
        data._ptr = None
        self.requires_grad = requires_grad
