"""The stand-in's torch.optim.Optimizer: as PyTorch's, it wraps its class's step once, at the first
optimizer made, in torch.autograd.profiler.record_function("Optimizer.step#<class>.step"), looked
up at call time (profile_hook_step), and inside it calls the global step hooks
(register_optimizer_step_pre_hook, register_optimizer_step_post_hook) before and after the step,
as PyTorch 2.x does. Its state is PyTorch's: a dict by parameter of the parameter's state."""
import collections
import functools

import torch

_global_optimizer_pre_hooks = collections.OrderedDict()
_global_optimizer_post_hooks = collections.OrderedDict()


def register_optimizer_step_pre_hook(hook):
    handle = torch.RemovableHandle(_global_optimizer_pre_hooks)
    _global_optimizer_pre_hooks[handle.id] = hook
    return handle


def register_optimizer_step_post_hook(hook):
    handle = torch.RemovableHandle(_global_optimizer_post_hooks)
    _global_optimizer_post_hooks[handle.id] = hook
    return handle


class Optimizer:
    def __init__(self, params, defaults):
        self.param_groups = [{"params": list(params), **defaults}]
        self.state = collections.defaultdict(dict)
        self._patch_step_function()

    @staticmethod
    def profile_hook_step(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            self = args[0]
            with torch.autograd.profiler.record_function("Optimizer.step#%s.step" % self.__class__.__name__):
                for pre_hook in list(_global_optimizer_pre_hooks.values()):
                    result = pre_hook(self, args, kwargs)
                    if result is not None:
                        args, kwargs = result
                out = func(*args, **kwargs)
                for post_hook in list(_global_optimizer_post_hooks.values()):
                    post_hook(self, args, kwargs)
                return out
        wrapper.hooked = True
        return wrapper

    def _patch_step_function(self):
        if not getattr(self.__class__.step, "hooked", False):
            self.__class__.step = self.profile_hook_step(self.__class__.step)

    def zero_grad(self, set_to_none=True):
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None
