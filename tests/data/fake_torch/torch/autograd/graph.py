"""The stand-in's torch.autograd.graph: _engine_run_backward, the Python entry of every backward
pass (PyTorch 2.x: Tensor.backward, torch.autograd.backward and torch.autograd.grad all reach the
engine through it), and register_multi_grad_hook as PyTorch's behaves: with mode "all", fn(grads)
once every tensor's gradient of a backward pass is computed; with mode "any", fn(grad) once, at
the first of them. Both are built on the tensors' own hooks (Tensor.register_hook)."""
import torch

from .variable import Variable


def _engine_run_backward(t_outputs, *args, **kwargs):
    return Variable._execution_engine.run_backward(t_outputs, *args, **kwargs)


class _MultiHandle:
    def __init__(self, handles):
        self.handles = handles

    def remove(self):
        for h in self.handles:
            h.remove()


def register_multi_grad_hook(tensors, fn, *, mode="all"):
    if mode not in ("all", "any"):
        raise ValueError("Expects mode to be one of ('all', 'any') but got %s" % mode)
    tensors = tuple(tensors)
    state = {"task": None, "count": 0, "grads": [None] * len(tensors)}

    def new_pass():
        task = torch._C._current_graph_task_id()
        if state["task"] == task:
            return False
        state.update(task=task, count=0, grads=[None] * len(tensors))
        return True

    if mode == "any":
        def hook(grad):
            if new_pass():
                fn(grad)
        return _MultiHandle([t.register_hook(hook) for t in tensors])

    def make(i):
        def hook(grad):
            new_pass()
            state["grads"][i] = grad
            state["count"] += 1
            if state["count"] == len(tensors):
                fn(tuple(state["grads"]))
        return hook
    return _MultiHandle([t.register_hook(make(i)) for i, t in enumerate(tensors)])
