"""The stand-in's torch.autograd: backward and grad calling the engine through
torch.autograd.graph._engine_run_backward, imported under that name here as PyTorch 2.x imports it
(`from .graph import _engine_run_backward`), so that backward() and grad() reach it by this
module's global at call time; its graph module and its profiler's record_function
(tests/data/fake_torch)."""
from . import graph, profiler  # noqa: F401
from .graph import _engine_run_backward
from .variable import Variable  # noqa: F401


def _tuple(tensors):
    return (tensors,) if not isinstance(tensors, (tuple, list)) else tuple(tensors)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, grad_variables=None, inputs=None):
    tensors = _tuple(tensors)
    _engine_run_backward(tensors, grad_tensors, bool(retain_graph or create_graph), create_graph,
                         _tuple(inputs) if inputs is not None else (), allow_unreachable=True, accumulate_grad=True)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, only_inputs=True,
         allow_unused=None, is_grads_batched=False, materialize_grads=False):
    return _engine_run_backward(_tuple(outputs), grad_outputs, bool(retain_graph or create_graph), create_graph,
                                _tuple(inputs), allow_unreachable=bool(allow_unused), accumulate_grad=False)
