// oom_catcher.cc: a stand-in for PyTorch's Python bindings in tests/recorder/test_oom_throw.py.
//
// PyTorch's HANDLE_TH_ERRORS catches `python_error` (torch/csrc/Exceptions.h) and restores
// the Python exception it carries. This library does the same around memsnap_malloc: loaded
// with ctypes.PyDLL (RTLD_LOCAL, like a Python extension), it checks that memsnap's exception
// unwinds through the C frames to a C++ catcher and arrives as the registered Python type.
#include <dlfcn.h>
#include <sys/types.h>

#include <exception>
#include <string>

extern "C" void *memsnap_malloc(ssize_t size, int device, void *stream);

typedef struct _object PyObject;
struct python_error : public std::exception {  // torch's layout
  PyObject *type = nullptr;
  PyObject *value = nullptr;
  PyObject *traceback = nullptr;
  std::string message;
  const char *what() const noexcept override { return message.c_str(); }
};

extern "C" {
// Allocates `size` bytes. Returns 0 and sets *ptr on success; on python_error restores the
// Python exception (the caller, through PyDLL, raises it) and returns 1; on any other C++
// exception returns 2; never lets an exception out.
int catcher_alloc(ssize_t size, void **ptr) {
  try {
    *ptr = memsnap_malloc(size, 0, nullptr);
    return 0;
  } catch (python_error &e) {
    auto incref = reinterpret_cast<void (*)(PyObject *)>(dlsym(RTLD_DEFAULT, "Py_IncRef"));
    auto restore = reinterpret_cast<void (*)(PyObject *, PyObject *, PyObject *)>(dlsym(RTLD_DEFAULT, "PyErr_Restore"));
    incref(e.type);
    incref(e.value);
    if (e.traceback) incref(e.traceback);
    restore(e.type, e.value, e.traceback);  // as torch's python_error::restore()
    return 1;
  } catch (std::exception &) {
    return 2;
  }
}
}
