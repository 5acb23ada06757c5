"""The stand-in's torch.cuda.amp.grad_scaler: a subclass of torch.amp.GradScaler that only fixes
the device, as PyTorch's is since 2.3 (its step is torch.amp's)."""
import torch.amp


class GradScaler(torch.amp.GradScaler):
    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                 enabled=True):
        super().__init__("cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled)
