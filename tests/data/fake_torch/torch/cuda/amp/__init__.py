"""The stand-in's torch.cuda.amp: GradScaler, torch.amp's for device "cuda" (PyTorch 2.3 on)."""
from .grad_scaler import GradScaler  # noqa: F401
