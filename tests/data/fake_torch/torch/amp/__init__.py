"""The stand-in's torch.amp: GradScaler (grad_scaler.py)."""
from .grad_scaler import GradScaler  # noqa: F401
