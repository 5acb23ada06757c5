"""The stand-in's torch.nn.modules.module: Module, whose __call__ runs the global forward
pre-hooks and forward hooks around forward as PyTorch's _call_impl does (a pre-hook may replace
the arguments, a hook the result; hooks registered with always_call run even when forward
raises), then the module's own forward hooks (register_forward_hook: its _forward_hooks, an
OrderedDict by handle id, as PyTorch keeps them), and the registration functions of those global
hooks."""
import collections

import torch

_global_forward_pre_hooks = collections.OrderedDict()
_global_forward_hooks = collections.OrderedDict()
_global_forward_hooks_always_called = collections.OrderedDict()


def register_module_forward_pre_hook(hook):
    handle = torch.RemovableHandle(_global_forward_pre_hooks)
    _global_forward_pre_hooks[handle.id] = hook
    return handle


def register_module_forward_hook(hook, *, with_kwargs=False, always_call=False):
    handle = torch.RemovableHandle(_global_forward_hooks, _global_forward_hooks_always_called)
    _global_forward_hooks[handle.id] = hook
    if always_call:
        _global_forward_hooks_always_called[handle.id] = True
    return handle


class Module:
    def __init__(self):
        object.__setattr__(self, "_parameters", collections.OrderedDict())
        object.__setattr__(self, "_buffers", collections.OrderedDict())
        object.__setattr__(self, "_modules", collections.OrderedDict())
        object.__setattr__(self, "_forward_hooks", collections.OrderedDict())
        self.training = True

    def register_forward_hook(self, hook):
        handle = torch.RemovableHandle(self._forward_hooks)
        self._forward_hooks[handle.id] = hook
        return handle

    def __setattr__(self, name, value):
        if isinstance(value, torch.nn.Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        for table in ("_parameters", "_buffers", "_modules"):
            d = self.__dict__.get(table)
            if d is not None and name in d:
                return d[name]
        raise AttributeError("'%s' object has no attribute '%s'" % (type(self).__name__, name))

    def register_buffer(self, name, tensor):
        self._buffers[name] = tensor

    def named_children(self):
        return iter(self._modules.items())

    def children(self):
        return iter(self._modules.values())

    def named_modules(self, memo=None, prefix=""):
        memo = set() if memo is None else memo
        if self in memo:
            return
        memo.add(self)
        yield prefix, self
        for name, sub in self._modules.items():
            yield from sub.named_modules(memo, prefix + ("." if prefix else "") + name)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def _each(self, table, recurse):
        seen = set()
        for m in (self.modules() if recurse else (self,)):
            for t in getattr(m, table).values():
                if t is not None and id(t) not in seen:
                    seen.add(id(t))
                    yield t

    def parameters(self, recurse=True):
        return self._each("_parameters", recurse)

    def buffers(self, recurse=True):
        return self._each("_buffers", recurse)

    def forward(self, *args, **kwargs):
        raise NotImplementedError

    def __call__(self, *args, **kwargs):
        for hook in list(_global_forward_pre_hooks.values()):
            result = hook(self, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
        result = None
        called = set()
        try:
            result = self.forward(*args, **kwargs)
            for hook in list(self.__dict__.get("_forward_hooks", {}).values()):
                out = hook(self, args, result)
                if out is not None:
                    result = out
            for key, hook in list(_global_forward_hooks.items()):
                if key in _global_forward_hooks_always_called:
                    called.add(key)
                out = hook(self, args, result)
                if out is not None:
                    result = out
        except Exception:
            for key, hook in list(_global_forward_hooks.items()):
                if key in _global_forward_hooks_always_called and key not in called:
                    try:
                        hook(self, args, result)
                    except Exception:  # noqa: BLE001 - PyTorch warns and raises the first error
                        pass
            raise
        return result
