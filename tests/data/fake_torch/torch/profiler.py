"""The stand-in's torch.profiler: record_function is torch.autograd.profiler's, as in PyTorch."""
from torch.autograd.profiler import record_function  # noqa: F401
