"""torch.cuda of the stand-in: device state and, as PyTorch does, torch.cuda.memory's public
functions (from .memory import *)."""
import os

import torch

from . import _utils, memory  # noqa: F401
from .memory import *  # noqa: F401,F403
from .memory import MemPool, use_mem_pool  # noqa: F401

OutOfMemoryError = torch.OutOfMemoryError


def is_initialized():
    return torch._initialized


def is_available():
    return True


def device_count():
    return 1


def current_device():
    return torch._current_device


class _DeviceProperties:
    def __init__(self, total):
        self.name = "stand-in GPU"
        self.total_memory = total


def get_device_properties(device=None):
    """The device's name and memory: FAKE_TORCH_DEVICE_MEMORY bytes (as the native allocator's)."""
    return _DeviceProperties(torch._parse_size(os.environ.get("FAKE_TORCH_DEVICE_MEMORY", "16G")))


def _lazy_init():
    torch._lazy_init()


def init():  # torch.cuda.init(): initialises CUDA now, as the first tensor would
    torch._lazy_init()


def synchronize(device=None):
    pass


def current_stream(device=None):
    return _Stream()


class _Stream:
    cuda_stream = 0


class _CudaRT:
    """torch.cuda.cudart(): cudaMemGetInfo of the stand-in's device."""

    def cudaMemGetInfo(self, device):
        native = torch._native_allocator()
        used = native.stats["reserved_bytes"]["all"]["current"]
        return (native.total - used, native.total)


def cudart():
    _lazy_init()
    return _CudaRT()
