"""The stand-in's torch.amp.grad_scaler.GradScaler: step(optimizer) calls optimizer.step() unless
the gradients held inf or NaN, which PyTorch finds by unscaling them (found_inf_per_device) and
the stand-in by its flag `found_inf`, set by the script before a step that should be skipped and
cleared by update(), as PyTorch's update() backs the scale off."""


class GradScaler:
    def __init__(self, device="cuda", init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        self._device = device
        self._scale = init_scale
        self._backoff_factor = backoff_factor
        self._enabled = enabled
        self.found_inf = False

    def is_enabled(self):
        return self._enabled

    def scale(self, outputs):
        return outputs

    def unscale_(self, optimizer):
        pass

    def step(self, optimizer, *args, **kwargs):
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        retval = None
        if not self.found_inf:
            retval = optimizer.step(*args, **kwargs)
        return retval

    def update(self, new_scale=None):
        if self.found_inf:
            self._scale *= self._backoff_factor
        self.found_inf = False

    def get_scale(self):
        return self._scale
