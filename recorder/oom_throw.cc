// oom_throw.cc: turns memsnap's out-of-memory (and any other allocation failure) into a Python
// exception inside PyTorch.
//
// The one C++ file of the library, because only C++ can do this. PyTorch's pluggable allocator
// does not check what the alloc function returns: a NULL becomes a tensor with data pointer 0,
// and the first kernel that touches it poisons the CUDA context. A C++ exception thrown from
// the alloc function, though, unwinds through CUDAPluggableAllocator::malloc (nothing there is
// noexcept) into the op's HANDLE_TH_ERRORS block, which translates it for Python.
//
// The exception thrown is one that block restores as a ready Python exception: `python_error`
// (torch/csrc/Exceptions.h), caught by its type name, whose restore() hands its (type, value,
// traceback) triple back to the interpreter. The struct below has torch's layout: a
// std::exception followed by three PyObject pointers and a message. memsnap.enable() registers
// torch.OutOfMemoryError through memsnap_set_python_oom_error(), so the user gets
// `torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...`, catchable as usual.
// Without a registered type (plain C++ hosts), a std::runtime_error is thrown, which PyTorch
// would turn into RuntimeError and other C++ hosts can catch. Other failures (a driver error, an
// allocation refused during a CUDA graph capture) raise Python's RuntimeError the same way
// (msi_throw_error), so a user's process is never aborted for an error PyTorch would report.
//
// The Python C API is found with dlsym at run time: libmemsnap does not link libpython.
#include <dlfcn.h>

#include <stdexcept>
#include <string>

extern "C" {
typedef struct _object PyObject;
typedef int (*gil_ensure_fn)(void);
typedef void (*gil_release_fn)(int);
typedef void (*err_set_string_fn)(PyObject *, const char *);
typedef void (*err_fetch_fn)(PyObject **, PyObject **, PyObject **);
typedef void (*decref_fn)(PyObject *);
}

namespace {
PyObject *oom_type = nullptr;

template <typename T>
T py_sym(const char *name) {
  return reinterpret_cast<T>(dlsym(RTLD_DEFAULT, name));
}
}  // namespace

// Same name and layout as torch's python_error, so torch's catch (python_error&) takes it.
struct python_error : public std::exception {
  PyObject *type = nullptr;
  PyObject *value = nullptr;
  PyObject *traceback = nullptr;
  std::string message;

  python_error() = default;
  python_error(const python_error &other) = delete;
  python_error(python_error &&other) noexcept
      : type(other.type), value(other.value), traceback(other.traceback), message(std::move(other.message)) {
    other.type = other.value = other.traceback = nullptr;
  }
  ~python_error() override {
    if (!type && !value && !traceback) return;
    auto ensure = py_sym<gil_ensure_fn>("PyGILState_Ensure");
    auto release = py_sym<gil_release_fn>("PyGILState_Release");
    auto decref = py_sym<decref_fn>("Py_DecRef");
    if (!ensure || !release || !decref) return;
    int gil = ensure();
    if (type) decref(type);
    if (value) decref(value);
    if (traceback) decref(traceback);
    release(gil);
  }
  const char *what() const noexcept override { return message.c_str(); }
};

extern "C" {

// Registers the Python exception type raised on out of memory (a borrowed reference that the
// caller keeps alive; memsnap.enable() passes torch.OutOfMemoryError). NULL unregisters.
__attribute__((visibility("default"))) void memsnap_set_python_oom_error(PyObject *type) { oom_type = type; }

}  // extern "C"

namespace {
// Throws a python_error of `type` when Python is there and a type is given, else a
// std::runtime_error. Never returns.
[[noreturn]] void throw_as(PyObject *type, const char *message) {
  auto ensure = py_sym<gil_ensure_fn>("PyGILState_Ensure");
  auto release = py_sym<gil_release_fn>("PyGILState_Release");
  auto set_string = py_sym<err_set_string_fn>("PyErr_SetString");
  auto fetch = py_sym<err_fetch_fn>("PyErr_Fetch");
  if (type && ensure && release && set_string && fetch) {
    python_error e;
    e.message = message;
    int gil = ensure();
    set_string(type, message);
    fetch(&e.type, &e.value, &e.traceback);
    release(gil);
    throw e;
  }
  throw std::runtime_error(message);
}
}  // namespace

extern "C" {

// Throw; never return. Called by memsnap_malloc with no lock held.
void msi_throw_oom(const char *message) { throw_as(oom_type, message); }

// Python's RuntimeError when memsnap.enable() registered the out-of-memory type (so PyTorch is
// there), else a std::runtime_error.
void msi_throw_error(const char *message) {
  PyObject **runtime_error = oom_type ? py_sym<PyObject **>("PyExc_RuntimeError") : nullptr;
  std::string text = std::string("memsnap: ") + message;
  throw_as(runtime_error ? *runtime_error : nullptr, text.c_str());
}

}  // extern "C"
