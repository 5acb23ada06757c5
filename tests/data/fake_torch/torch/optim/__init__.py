"""The stand-in's torch.optim: an Optimizer whose subclasses' step runs in a record_function named
"Optimizer.step#<class>.step", as PyTorch's does, and AdamW (tests/data/fake_torch). As PyTorch's
package does, it deletes its submodules' names (torch.optim.optimizer is reached by its module
path only, sys.modules)."""
from .adamw import AdamW  # noqa: F401
from .optimizer import Optimizer  # noqa: F401

del adamw  # noqa: F821
del optimizer  # noqa: F821
