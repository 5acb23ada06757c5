"""The stand-in's torch.autograd: only its profiler's record_function (tests/data/fake_torch)."""
from . import profiler  # noqa: F401
