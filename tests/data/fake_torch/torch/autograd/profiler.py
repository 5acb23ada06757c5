"""The stand-in's torch.autograd.profiler: record_function, as PyTorch's is built.

PyTorch's record_function is a context manager and decorator whose __enter__ starts a C++
RecordFunction of USER_SCOPE (torch.ops.profiler._record_function_enter_new) and whose __exit__
ends it; its callbacks are what PyTorch's memory recorder turns into annotations. Here entering
and leaving only count, so that memsnap.enable()'s ranges can be told from the class's own work.
"""
import contextlib

entered = 0
left = 0


class record_function(contextlib.ContextDecorator):
    def __init__(self, name, args=None):
        self.name = name
        self.args = args
        self.record = None

    def __enter__(self):
        global entered
        entered += 1
        self.record = object()  # PyTorch: torch.ops.profiler._record_function_enter_new(name, args)
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        global left
        left += 1
        self.record = None
        return False
