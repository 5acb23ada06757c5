"""The stand-in's torch.nn.modules."""
from .module import Module  # noqa: F401
from .layers import GELU, Embedding, Linear, ModuleList  # noqa: F401
