"""sitecustomize for the zoo (tests/gpu/zoo/run_zoo.py): what each zoo program's process measured
of itself, written at exit without editing the program.

run_zoo.py puts this directory on PYTHONPATH for the native runs and for the runs under `memsnap
run` (whose own sitecustomize comes first and imports this one after it). It does nothing unless
ZOO_REPORT names a directory. At exit, a process that imported torch and used CUDA writes
ZOO_REPORT/<pid>.json: its rank, the peak allocated and reserved bytes of each device it used
(torch.cuda.max_memory_allocated / max_memory_reserved: PyTorch's own counters natively,
memsnap's under `memsnap run`), and, for CuPy and JAX programs, their own peaks.

With ZOO_PROFILE=1 as well (native runs only), the process runs under torch.profiler with memory
profiling from the moment it imports torch, and the report adds `profiler`: torch.profiler's
memory timeline by category at its own peak (the categories memsnap's are checked against). With
ZOO_PROFILE_FROM=optimizer the profile begins when the program makes its first optimizer, after
its imports and its model: the stacks PyTorch 2.11's memory timeline requires make a profile of
everything HF's imports and model construction run last minutes; tensors made before (the
parameters) are then outside the timeline, whose gradients, activations and optimizer state
are all made after.
"""
import atexit
import json
import os
import sys

_dir = os.environ.get("ZOO_REPORT")
_profiler = None


def _rank():
    for var in ("RANK", "LOCAL_RANK"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


def _profile_categories(prof, device):
    """torch.profiler's memory timeline on `device` at the moment its total was highest: bytes by
    category name (PARAMETER..., 'unknown'), the total and the time; {} when it has none."""
    from torch.profiler import _memory_profiler as mp
    timeline = mp.MemoryProfileTimeline(prof._memory_profile())
    times, sizes = timeline._coalesce_timeline(device)
    if not sizes:
        return {}
    names = [c.name.lower() if c is not None else "unknown" for c in mp._CATEGORY_TO_INDEX]
    offset = len(sizes[0]) - len(names)  # 2.x keeps one unused slot before the categories
    best = max(range(len(sizes)), key=lambda i: sum(sizes[i]))
    row = sizes[best]
    out = {names[i]: int(row[i + offset]) for i in range(len(names))}
    # each category's own highest value too (the gradient's life is not the peak's moment)
    out_max = {names[i]: int(max(s[i + offset] for s in sizes)) for i in range(len(names))}
    return {"at_peak": out, "total_at_peak": int(sum(row)), "max": out_max}


def _report():
    torch = sys.modules.get("torch")
    rep = {"pid": os.getpid(), "rank": _rank(), "argv": sys.argv}
    try:
        if torch is not None and torch.cuda.is_initialized():
            rep["devices"] = {}
            for d in range(torch.cuda.device_count()):
                a, r = torch.cuda.max_memory_allocated(d), torch.cuda.max_memory_reserved(d)
                if a or r:
                    rep["devices"][str(d)] = {"peak_allocated": a, "peak_reserved": r}
    except Exception as e:  # noqa: BLE001 - a report, never the program's failure
        rep["error"] = repr(e)
    if _profiler is not None:
        try:
            _profiler.stop()
            rep["profiler"] = _profile_categories(_profiler, "cuda:%d" % torch.cuda.current_device())
        except Exception as e:  # noqa: BLE001 - torch.profiler's own failure: said, not hidden
            import traceback
            rep["profiler_error"] = "".join(traceback.format_exception_only(type(e), e)).strip()[-500:]
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            pool = cupy.get_default_memory_pool()
            rep["cupy_pool_total_bytes"] = pool.total_bytes()
        except Exception as e:  # noqa: BLE001
            rep["cupy_error"] = repr(e)
    jax = sys.modules.get("jax")
    if jax is not None:
        try:
            stats = jax.devices()[0].memory_stats() or {}
            rep["jax_peak_bytes_in_use"] = stats.get("peak_bytes_in_use")
        except Exception as e:  # noqa: BLE001
            rep["jax_error"] = repr(e)
    with open(os.path.join(_dir, "%d.json" % os.getpid()), "w") as f:
        json.dump(rep, f)


def _start_profiler(torch):
    global _profiler
    from torch.profiler import ProfilerActivity, profile
    # the memory timeline needs all three (PyTorch 2.11: "with_stack=True required for memory
    # profiling", run 40's gpt2_eager and resnet50 comparisons got nothing without it)
    _profiler = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True,
                        record_shapes=True, with_stack=True)
    _profiler.start()


def _at_first_optimizer(torch):
    """Starts the profiler when the program's first optimizer has been made."""
    init = torch.optim.Optimizer.__init__

    def init_then_start(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if _profiler is None:
            _start_profiler(torch)
    torch.optim.Optimizer.__init__ = init_then_start


def _after_torch_import():
    """Starts the profiler once the program has imported torch (a meta path hook, as memsnap's),
    or arranges for it to start at the first optimizer (ZOO_PROFILE_FROM=optimizer)."""
    import importlib.abc
    import importlib.util

    class Hook(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname != "torch":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(fullname)
            if spec is None or spec.loader is None:
                return spec
            exec_module = spec.loader.exec_module

            def exec_then_start(module):
                exec_module(module)
                if os.environ.get("ZOO_PROFILE_FROM") == "optimizer":
                    _at_first_optimizer(module)
                else:
                    _start_profiler(module)
            spec.loader.exec_module = exec_then_start
            return spec
    sys.meta_path.insert(0, Hook())


if _dir:
    atexit.register(_report)
    if os.environ.get("ZOO_PROFILE") == "1":
        _after_torch_import()
