"""The stand-in's torch.optim: an Optimizer whose subclasses' step runs in a record_function named
"Optimizer.step#<class>.step", as PyTorch's does, and AdamW (tests/data/fake_torch)."""
from .adamw import AdamW  # noqa: F401
from .optimizer import Optimizer  # noqa: F401
