"""The stand-in's torch.nn: Module with PyTorch's global forward hooks (modules/module.py),
Parameter, and a few modules whose outputs are the stand-in's ops (torch._op): Linear, Embedding,
GELU, ModuleList (tests/data/fake_torch)."""
from .modules import GELU, Embedding, Linear, Module, ModuleList  # noqa: F401
from .parameter import Parameter  # noqa: F401
