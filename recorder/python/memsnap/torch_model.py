"""torch_model.py: a PyTorch program's model told to memsnap's history, in its own language: which
module runs forward or backward, which blocks hold parameters, buffers, gradients and optimizer
state, where optimizer steps begin, end or are skipped, and when backward passes run (memsnap.h,
"What a framework tells the history"; the module, tensor, step and backward events of
docs/snapshot-format.md; docs/pytorch.md, "The model's language").

install(torch, lib) is called by memsnap.enable() when the history records (MEMSNAP_RECORD=1, as
`memsnap run` sets it), or by memsnap.record() when recording starts later; MEMSNAP_TORCH_MODULES=0
leaves PyTorch alone. Once a process it registers, where the installed PyTorch has them:

* Modules, as PyTorch's ModTracker does (torch/distributed/_tools/mod_tracker.py): a global
  forward pre-hook (torch.nn.modules.module.register_module_forward_pre_hook) records the
  module's forward beginning, and a global forward hook (register_module_forward_hook,
  always_call=True: also when forward raises) its end. Outside a backward pass
  (torch._C._current_graph_task_id() == -1), the forward hook hooks the outputs that require
  grad, whose first gradient begins the module's backward (register_multi_grad_hook, mode "any"),
  and the pre-hook the inputs that require grad, whose gradients, once all are computed, end it
  (mode "all"); one tensor gets Tensor.register_hook, the same hook for one tensor at a lower
  cost, and a leaf none (a tensor that lives across steps would gather hooks). A module whose
  backward began and whose end never came (its inputs need no gradient: the model's root, an
  embedding) ends when the backward pass ends, innermost first. Nothing is recorded inside
  torch.compile's tracing or compiled regions (torch.compiler.is_compiling, and
  torch._dynamo.eval_frame._is_in_compiled_region once dynamo is loaded), as ModTracker skips them.
* Names, as ModTracker and MemTracker give them: a module first seen without a known parent is a
  root, named by its class (GPT2LMHeadModel; a second root of the same class alive beside it
  GPT2LMHeadModel#2, a number given again once its root is gone), and the modules below it by
  their paths (GPT2LMHeadModel.transformer.h.3.mlp: named_modules). A name is kept per module
  object (by id, checked through a weak reference), its label id per name (memsnap_label once a
  name).
* Tensors: the first time a root runs forward, each module's own parameters and buffers
  (recurse=False), labelled with that module's name. At each optimizer step, through the global
  step hooks (torch.optim.optimizer.register_optimizer_step_pre_hook / _post_hook): before it,
  the step's beginning (label: the optimizer's class) and every parameter of its param_groups with
  its .grad (label: the parameter's module, 0 when not known); after it, every CUDA tensor of
  optimizer.state[p] (label: p's module), then the step's end. One memsnap_tensor_events call a
  hook; CUDA tensors only, by the data pointer of their storage (a DTensor's local tensor), their
  bytes (numel * element_size) and their device.
* Skipped steps: GradScaler.step (torch.amp.grad_scaler.GradScaler, which torch.cuda.amp's
  subclasses; torch.cuda.amp's own where it has its own step, as before PyTorch 2.3) is wrapped:
  when it returns without the optimizer's step having begun, the step was skipped (inf or NaN
  gradients), and a skipped step of the optimizer's class is recorded.
* Backward passes: torch.autograd.graph._engine_run_backward, through which Tensor.backward,
  torch.autograd.backward and torch.autograd.grad all reach the engine in PyTorch 2.x (also under
  the name torch.autograd imported it, which they call), is wrapped by memsnap_backward_begin and
  memsnap_backward_end (finally): the begin lends the Python frames of the backward() call to the
  allocations of autograd's threads (recorder/history/stacks.c). Without it (PyTorch 1.x),
  torch.autograd.backward and torch.autograd.grad are wrapped instead. Modules left open by a
  pass that no wrapper saw (the engine called from C++) end when the next wrapped pass begins.

Costs: the hooks run on every module call, so they do little: one dict look-up for the module's
label, a ctypes call (functions bound once, with argtypes), the tensor hooks made once a label
and reused; no list is made for the common single tensor. Every hook catches its own errors: a
failure leaves an event unrecorded, never the program broken.
"""
import ctypes
import functools
import sys
import weakref

_installed = False
_lib_label = _module_event = _tensor_events = _step_event = _backward_begin = _backward_end = None
_Tensor = None
_graph_task_id = None    # torch._C._current_graph_task_id, or None (PyTorch 1.x)
_multi_grad_hook = None  # torch.autograd.graph.register_multi_grad_hook, or None
_is_compiling = None     # torch.compiler.is_compiling (or torch._utils'), or None
_region_fn = None        # torch._dynamo.eval_frame._is_in_compiled_region once dynamo is loaded

_labels = {}             # name -> label id
_modules = {}            # id(module) -> (weak reference, label id)
_tensor_labels = {}      # id(parameter or buffer) -> (weak reference, label id of its module)
_roots = {}              # class name -> {number: weak reference to the root named with it}
_class_labels = {}       # optimizer class -> label id
_begin_hooks = {}        # label id -> the hook that begins its module's backward
_end_hooks = {}          # label id -> the hook that ends it
_open = []               # label ids of the modules whose backward began and has not ended, innermost last
_passes = 0              # backward passes running inside the engine's wrapper
_local_types = {}        # tensor type -> whether its objects are DTensors (a local tensor inside)
_scaler_optimizer = None  # the optimizer a GradScaler.step is stepping
_scaler_stepped = False   # whether that optimizer's step began

MODULE_FORWARD, MODULE_FORWARD_END, MODULE_BACKWARD, MODULE_BACKWARD_END = 0, 1, 2, 3
PARAMETER, GRADIENT, OPTIMIZER_STATE, BUFFER = 1, 2, 3, 4
STEP_BEGIN, STEP_END, STEP_SKIPPED = 1, 2, 3


def _label(name):
    """The label id of `name` (interned once), 0 when the library refuses it."""
    lid = _labels.get(name)
    if lid is None:
        lid = _lib_label(name.encode("utf-8", "surrogateescape"))
        if lid <= 0:
            return 0
        _labels[name] = lid
    return lid


def _remember(table, obj, label):
    """table[id(obj)] = (weak reference, label), dropped when obj goes."""
    key = id(obj)

    def gone(ref, key=key):
        entry = table.get(key)
        if entry is not None and entry[0] is ref:
            del table[key]
    table[key] = (weakref.ref(obj, gone), label)


def _known(table, obj):
    entry = table.get(id(obj))
    return entry[1] if entry is not None and entry[0]() is obj else 0


def _tensor_row(t):
    """(storage pointer, bytes, device) of a CUDA tensor, None for another."""
    kind = type(t)
    local = _local_types.get(kind)
    if local is None:
        local = _local_types[kind] = hasattr(kind, "_local_tensor")
    if local:
        t = t._local_tensor
    if not t.is_cuda:
        return None
    storage = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    index = t.device.index
    return storage.data_ptr(), t.numel() * t.element_size(), index if index is not None else -1


def _emit(rows):
    """One memsnap_tensor_events call for rows of (tensor, role, label); a tensor whose storage
    cannot be read (a sparse one) is left out."""
    cells = []
    for t, role, label in rows:
        try:
            row = _tensor_row(t)
        except Exception:  # noqa: BLE001
            continue
        if row is not None:
            cells.append(row + (role, label))
    n = len(cells)
    if not n:
        return
    _tensor_events(n, (ctypes.c_uint64 * n)(*[c[0] for c in cells]), (ctypes.c_uint64 * n)(*[c[1] for c in cells]),
                   (ctypes.c_uint8 * n)(*[c[3] for c in cells]), (ctypes.c_int32 * n)(*[c[4] for c in cells]),
                   (ctypes.c_int16 * n)(*[c[2] for c in cells]))


def _name_root(root):
    """Names a module first seen without a known parent, and every module below it; records their
    own parameters and buffers. Returns the root's label id (0, remembered, for a module that
    cannot be walked). The first root of a class alive is named by the class, the next ones
    Class#2, Class#3...: a number whose root is gone is given again (DataParallel's replicas, new
    modules each forward, reuse their names)."""
    cls = type(root).__name__
    numbers = _roots.setdefault(cls, {})
    n = 1
    while n in numbers and numbers[n]() is not None:
        n += 1
    numbers[n] = weakref.ref(root)
    name = cls if n == 1 else "%s#%d" % (cls, n)
    rows, seen = [], set()
    try:
        for path, module in root.named_modules():
            label = _label(name + "." + path if path else name)
            _remember(_modules, module, label)  # a former root now below a parent: renamed, as ModTracker does
            for role, tensors in ((PARAMETER, module.parameters(recurse=False)),
                                  (BUFFER, module.buffers(recurse=False))):
                for t in tensors:
                    if t is not None and id(t) not in seen:
                        seen.add(id(t))
                        _remember(_tensor_labels, t, label)
                        rows.append((t, role, label))
    except Exception:  # noqa: BLE001 - a module that cannot be walked: no events, not asked again
        _remember(_modules, root, 0)
        return 0
    _emit(rows)
    return _known(_modules, root)


def _module_label(module):
    entry = _modules.get(id(module))
    if entry is not None and entry[0]() is module:
        return entry[1]
    return _name_root(module)


def _begin_hook(label):
    """The hook (of one tensor, or of several) that begins module `label`'s backward: made once."""
    hook = _begin_hooks.get(label)
    if hook is None:
        def hook(*_):
            try:
                _module_event(label, MODULE_BACKWARD)
                _open.append(label)
            except Exception:  # noqa: BLE001 - never break the program for an event
                pass
        _begin_hooks[label] = hook
    return hook


def _end_hook(label):
    """The hook that ends module `label`'s backward (if it began): made once."""
    hook = _end_hooks.get(label)
    if hook is None:
        def hook(*_):
            try:
                for i in range(len(_open) - 1, -1, -1):
                    if _open[i] == label:
                        del _open[i]
                        _module_event(label, MODULE_BACKWARD_END)
                        break
            except Exception:  # noqa: BLE001
                pass
        _end_hooks[label] = hook
    return hook


def _collect(obj, out, depth):
    """The tensors in obj (nested tuples, lists, dict values) that require grad and are not leaves."""
    if isinstance(obj, _Tensor):
        if obj.requires_grad and obj.grad_fn is not None:
            out.append(obj)
    elif depth < 4 and isinstance(obj, (tuple, list)):
        for x in obj:
            _collect(x, out, depth + 1)
    elif depth < 4 and isinstance(obj, dict):
        for x in obj.values():
            _collect(x, out, depth + 1)


def _hook_grads(obj, hook, mode):
    """Hooks the gradients of obj's tensors: `hook` once they are computed (mode "all") or at the
    first (mode "any"); nothing when none requires grad."""
    if type(obj) is tuple and len(obj) == 1:
        obj = obj[0]
    if isinstance(obj, _Tensor):  # the common case: one tensor, its own hook
        if obj.requires_grad and obj.grad_fn is not None:
            obj.register_hook(hook)
        return
    tensors = []
    _collect(obj, tensors, 0)
    if len(tensors) == 1:
        tensors[0].register_hook(hook)
    elif tensors:
        _multi_grad_hook(tensors, hook, mode=mode)


def _compiled():
    """Whether the hooks run inside torch.compile's tracing or a compiled region."""
    if _is_compiling is not None and _is_compiling():
        return True
    global _region_fn
    if _region_fn is None:
        eval_frame = sys.modules.get("torch._dynamo.eval_frame")
        if eval_frame is None:
            return False
        _region_fn = getattr(eval_frame, "_is_in_compiled_region", None) or (lambda: False)
    return _region_fn()


def _forward_pre_hook(module, args):
    try:
        if _compiled():
            return None
        label = _module_label(module)
        if label:
            _module_event(label, MODULE_FORWARD)
            if _multi_grad_hook is not None and _graph_task_id() == -1:
                _hook_grads(args, _end_hook(label), "all")
    except Exception:  # noqa: BLE001
        pass
    return None


def _forward_hook(module, args, output):
    try:
        if _compiled():
            return None
        label = _module_label(module)
        if label:
            _module_event(label, MODULE_FORWARD_END)
            if _multi_grad_hook is not None and output is not None and _graph_task_id() == -1:
                _hook_grads(output, _begin_hook(label), "any")
    except Exception:  # noqa: BLE001
        pass
    return None


def _class_label(obj):
    cls = type(obj)
    lid = _class_labels.get(cls)
    if lid is None:
        lid = _class_labels[cls] = _label(cls.__name__)
    return lid


def _step_pre_hook(optimizer, args, kwargs):
    global _scaler_stepped
    try:
        if optimizer is _scaler_optimizer:
            _scaler_stepped = True
        label = _class_label(optimizer)
        if label:
            _step_event(label, STEP_BEGIN)
        rows = []
        for group in optimizer.param_groups:
            for p in group["params"]:
                owner = _known(_tensor_labels, p)
                rows.append((p, PARAMETER, owner))
                g = p.grad
                if g is not None:
                    rows.append((g, GRADIENT, owner))
        _emit(rows)
    except Exception:  # noqa: BLE001
        pass
    return None


def _step_post_hook(optimizer, args, kwargs):
    try:
        rows = []
        state = optimizer.state
        for group in optimizer.param_groups:
            for p in group["params"]:
                s = state.get(p)
                if s:
                    owner = _known(_tensor_labels, p)
                    for v in s.values():
                        if isinstance(v, _Tensor):
                            rows.append((v, OPTIMIZER_STATE, owner))
        _emit(rows)
        label = _class_label(optimizer)
        if label:
            _step_event(label, STEP_END)
    except Exception:  # noqa: BLE001
        pass
    return None


def _wrap_scaler_step(cls):
    """GradScaler.step of `cls` records a skipped step when the optimizer's step did not begin."""
    original = cls.__dict__.get("step")
    if original is None or getattr(original, "_memsnap", False):
        return False

    @functools.wraps(original)
    def step(self, optimizer, *args, **kwargs):
        global _scaler_optimizer, _scaler_stepped
        if optimizer is _scaler_optimizer:  # a subclass's step calling its base's: the outer one records
            return original(self, optimizer, *args, **kwargs)
        outer = (_scaler_optimizer, _scaler_stepped)
        _scaler_optimizer, _scaler_stepped = optimizer, False
        try:
            result = original(self, optimizer, *args, **kwargs)
            skipped = not _scaler_stepped
        finally:
            _scaler_optimizer, _scaler_stepped = outer
        if skipped:
            try:
                label = _class_label(optimizer)
                if label:
                    _step_event(label, STEP_SKIPPED)
            except Exception:  # noqa: BLE001
                pass
        return result
    step._memsnap = True
    cls.step = step
    return True


def _end_open(depth):
    """Ends the backward of the modules opened past `depth`, innermost first."""
    while len(_open) > depth:
        _module_event(_open.pop(), MODULE_BACKWARD_END)


def _backward_wrapper(original):
    """original (the engine's entry) between memsnap_backward_begin and memsnap_backward_end; the
    modules whose backward began in the pass and did not end, ended with it (those of a pass run
    where no wrapper saw it, at the next one's start)."""
    @functools.wraps(original)
    def run_backward(*args, **kwargs):
        global _passes
        try:
            if _passes == 0 and _open:
                _end_open(0)
            _backward_begin()
        except Exception:  # noqa: BLE001
            pass
        depth = len(_open)
        _passes += 1
        try:
            return original(*args, **kwargs)
        finally:
            _passes -= 1
            try:
                _end_open(depth)
                _backward_end()
            except Exception:  # noqa: BLE001
                pass
    run_backward._memsnap = True
    return run_backward


def _wrap_backward(torch):
    """Wraps the engine's Python entry (every name it is called by); returns what was wrapped."""
    autograd = torch.autograd
    graph = getattr(autograd, "graph", None)
    original = getattr(graph, "_engine_run_backward", None)
    if original is not None:
        if getattr(original, "_memsnap", False):
            return []
        wrapped = _backward_wrapper(original)
        graph._engine_run_backward = wrapped
        done = ["torch.autograd.graph._engine_run_backward"]
        if getattr(autograd, "_engine_run_backward", None) is original:
            autograd._engine_run_backward = wrapped
            done.append("torch.autograd._engine_run_backward")
        return done
    done = []  # PyTorch 1.x: the public entries (Tensor.backward calls torch.autograd.backward)
    for name in ("backward", "grad"):
        fn = getattr(autograd, name, None)
        if fn is not None and not getattr(fn, "_memsnap", False):
            setattr(autograd, name, _backward_wrapper(fn))
            done.append("torch.autograd." + name)
    return done


def _bind(lib):
    global _lib_label, _module_event, _tensor_events, _step_event, _backward_begin, _backward_end
    _lib_label = lib.memsnap_label
    _module_event = lib.memsnap_module_event
    _tensor_events = lib.memsnap_tensor_events
    _step_event = lib.memsnap_step_event
    _backward_begin = lib.memsnap_backward_begin
    _backward_end = lib.memsnap_backward_end


def install(torch, lib):
    """Registers the hooks and wrappers above, once a process. Returns the names of what it
    hooked or wrapped (empty when installed before, or when the library lacks the calls)."""
    global _installed, _Tensor, _graph_task_id, _multi_grad_hook, _is_compiling
    if _installed or not hasattr(lib, "memsnap_module_event"):
        return []
    _installed = True
    _bind(lib)
    _Tensor = torch.Tensor
    _graph_task_id = getattr(torch._C, "_current_graph_task_id", None) or (lambda: -1)
    _multi_grad_hook = getattr(getattr(torch.autograd, "graph", None), "register_multi_grad_hook", None)
    compiler = getattr(torch, "compiler", None)
    _is_compiling = getattr(compiler, "is_compiling", None) or getattr(getattr(torch, "_utils", None),
                                                                      "is_compiling", None)
    done = []
    module = getattr(getattr(getattr(torch, "nn", None), "modules", None), "module", None)
    pre = getattr(module, "register_module_forward_pre_hook", None)
    post = getattr(module, "register_module_forward_hook", None)
    if pre is not None and post is not None:
        pre(_forward_pre_hook)
        try:
            post(_forward_hook, always_call=True)
        except TypeError:  # before always_call (PyTorch 2.1)
            post(_forward_hook)
        done += ["torch.nn.modules.module.register_module_forward_pre_hook",
                 "torch.nn.modules.module.register_module_forward_hook"]
    # by its module path: torch/optim/__init__.py deletes its submodules' names from the package
    optimizer = _import("torch.optim.optimizer")
    step_pre = getattr(optimizer, "register_optimizer_step_pre_hook", None)
    step_post = getattr(optimizer, "register_optimizer_step_post_hook", None)
    if step_pre is not None and step_post is not None:
        step_pre(_step_pre_hook)
        step_post(_step_post_hook)
        done += ["torch.optim.optimizer.register_optimizer_step_pre_hook",
                 "torch.optim.optimizer.register_optimizer_step_post_hook"]
        # a skipped step is told from a step that did not begin: only with the step hooks
        for path in ("torch.amp.grad_scaler", "torch.cuda.amp.grad_scaler"):
            cls = getattr(_import(path), "GradScaler", None)
            if cls is not None and _wrap_scaler_step(cls):
                done.append(path + ".GradScaler.step")
    done += _wrap_backward(torch)
    return done


def _import(path):
    try:
        __import__(path)
        return sys.modules[path]
    except Exception:  # noqa: BLE001 - an optional part of PyTorch
        return None
