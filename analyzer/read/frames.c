/* frames.c: how frames read in reports, and which of them matter.
 *
 *   - Short names (ms_short_name), as heaptrack and profilers show C++ functions: no return type,
 *     template arguments and parameter lists collapsed to <> and (), qualifiers after the
 *     parameters and GCC's clone suffixes ([clone .isra.0]) dropped. An autograd node's apply reads
 *     as its node (MulBackward0); an operator's entry in PyTorch's dispatcher as the operator
 *     (at::_ops::mul_Tensor::call is aten::mul), no machinery then, so that a site whose other
 *     native frames are all dispatch machinery starts at its operator. The whole name stays in the
 *     frame (--full-names, JSON's `name`, the page's hover).
 *   - Machinery: frames that say nothing about the program (the allocator and PyTorch's stack
 *     capture, tensor creation, operator dispatch, autograd's engine, the interpreter and its
 *     bindings, unnamed frames, C and thread start-up, PyTorch's module-call plumbing), by glob
 *     patterns over the short name (and the file, for Python frames): the built-in list below
 *     plus the user's (--fold). Each frame is classified once, when its snapshot is loaded.
 *   - The frames that matter of a stack (ms_stack_frames_that_matter): machinery left out, so a
 *     stack starts at the operator that allocated or at the user's code; in a stack with Python
 *     frames, the first native frame that is not machinery (the operator) and then the Python
 *     frames, the native frames between them (the operator's internals, bindings, interpreter)
 *     folded away.
 *   - The program's own code (ms_frame_is_program): the frames that are neither a library's, the
 *     interpreter's nor the standard library's; reports keep the innermost of them, and the
 *     analysis finds a program's loop in them.
 *   - Frame identity across processes (ms_frame_key): function, file and line; module name and
 *     offset for unnamed frames (their addresses move with ASLR); never addresses or row ids.
 */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "read.h"

/* ---- short names ------------------------------------------------------------------------ */

static bool is_ident(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* Index of the bracket that closes the one at name[i] ('(' or '<'); 0 when it is not closed.
 * Inside template arguments, angle brackets within parentheses are the parentheses' own. */
static size_t closing(const char *name, size_t i, size_t *budget) {
  char open = name[i], close = open == '(' ? ')' : '>';
  int depth = 0, parens = 0;
  for (size_t j = i; name[j] && *budget; j++, --*budget) {
    char c = name[j];
    if (open == '<' && (c == '(' || c == ')')) {
      parens += c == '(' ? 1 : parens > 0 ? -1 : 0;
      continue;
    }
    if (parens) continue;
    if (c == open) depth++;
    else if (c == close && --depth == 0) return j;
  }
  return 0;
}

/* True at name[i] when the word `operator` starts there. */
static bool operator_at(const char *name, size_t i) {
  return strncmp(name + i, "operator", 8) == 0 && (i == 0 || !is_ident(name[i - 1])) && !is_ident(name[i + 8]);
}

/* True for the space at s[i] when it follows an operator's name ("operator new", "operator<<
 * <char>"): part of the name, not the end of a return type. */
static bool after_operator(const char *s, size_t i) {
  size_t k = i;
  while (k > 0 && strchr("<>=!+-*/%^&|~,[]()", s[k - 1])) k--;
  return k >= 8 && operator_at(s, k - 8);
}

void ms_short_name(const char *name, char *out, size_t len) {
  size_t o = 0, n = strlen(name), budget = 64 * n + 1024; /* bounded work: an unclosed "((((" */
  if (!len) return;
#define PUT(c) (o + 1 < len ? (void)(out[o++] = (c)) : (void)0)
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    if (operator_at(name, i)) { /* its symbol is no bracket: operator(), operator<<, operator[] */
      for (size_t k = 0; k < 8; k++) PUT(name[i + k]);
      i += 8;
      if (name[i] == '(' && name[i + 1] == ')') PUT('('), PUT(')'), i += 2;
      while (name[i] && strchr("<>=!+-*/%^&|~,[]", name[i])) PUT(name[i]), i++;
      i--;
      continue;
    }
    if (c == ' ' && strncmp(name + i, " [clone ", 8) == 0) { /* GCC's clone suffixes */
      const char *end = strchr(name + i, ']');
      if (end) {
        i = (size_t)(end - name);
        continue;
      }
    }
    if (c == '(' && strncmp(name + i, "(anonymous namespace)", 21) == 0) {
      for (size_t k = 0; k < 21; k++) PUT(name[i + k]);
      i += 20;
      continue;
    }
    /* a parameter list, or template arguments (after a name: "<lambda>" is no template) */
    bool template = c == '<' && i > 0 && (is_ident(name[i - 1]) || (name[i - 1] == ' ' && after_operator(name, i - 1)));
    size_t j = c == '(' || template ? closing(name, i, &budget) : 0;
    if (j) {
      PUT(c), PUT(c == '(' ? ')' : '>');
      i = j;
      continue;
    }
    PUT(c);
  }
#undef PUT
  out[o] = '\0';
  /* Qualifiers after the parameter list: " const", " volatile", " &", " &&", " noexcept". */
  char *close = strrchr(out, ')');
  if (close && close[1] == ' ' && strspn(close + 1, " constvolatilenxcept&") == strlen(close + 1)) close[1] = '\0';
  /* A return type: the name starts after the last space outside brackets ("operator new" and
     "(anonymous namespace)" keep theirs). */
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; out[i]; i++) {
    if (out[i] == '(' || out[i] == '<' || out[i] == '{') depth++;
    else if ((out[i] == ')' || out[i] == '>' || out[i] == '}') && depth > 0) depth--;
    else if (out[i] == ' ' && depth == 0 && !after_operator(out, i)) start = i + 1;
  }
  if (start && out[start]) memmove(out, out + start, strlen(out + start) + 1);
}

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

static bool unnamed(const ms_frame *f) { return !f->python && (!f->name[0] || strncmp(f->name, "0x", 2) == 0); }

/* The node's name when a short C++ name is an autograd node's apply: PyTorch's generated nodes
 * ("torch::autograd::generated::MmBackward0::apply()", and the "..._apply_functional()" it calls)
 * and AccumulateGrad's; NULL otherwise. The name is `short` from its returned start, *n bytes. */
static const char *node_name(const char *short_name, size_t *n) {
  static const char generated[] = "torch::autograd::generated::", accumulate[] = "torch::autograd::AccumulateGrad::apply()";
  if (strcmp(short_name, accumulate) == 0) {
    *n = strlen("AccumulateGrad");
    return short_name + strlen("torch::autograd::");
  }
  if (strncmp(short_name, generated, sizeof generated - 1) != 0) return NULL;
  const char *node = short_name + sizeof generated - 1, *end = strstr(node, "::apply()");
  if (!end) end = strstr(node, "_apply_functional()");
  if (!end || end == node || memchr(node, ':', (size_t)(end - node)) || !strstr(node, "Backward")) return NULL;
  *n = (size_t)(end - node);
  return node;
}

/* Overload names of ATen's operators that start with a lower-case letter (the others start with
 * an upper-case one: Tensor, Scalar, Tensor_Scalar, IntList...). */
static const char *const lower_overloads[] = {"dim", "int", "out", "self", "dtype", "default", "using_ints", "using_sizes",
                                              "names", "correction", "vec", "input", "other", "start", "device",
                                              "memory_format", "src", "source", "value", "values", "generator", "float",
                                              "bool", "str", "mode"};
/* ATen's factories, which every operator calls for its output: the operator that called one names
 * the allocation better (at::_ops::empty_like inside clone is clone's output). */
static const char *const factories[] = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                                        "empty_permuted", "_empty_affine_quantized"};

/* "aten::mul" for the short C++ name of an operator's entry in PyTorch's dispatcher
 * ("at::_ops::mul_Tensor::call()", whose struct is the operator's name and its overload's), into
 * out[len]; false for any other name and for the factories. The overload is what follows the
 * first '_' (not the name's first character) that starts an upper-case word or a lower-case
 * overload of the list above: mul_Tensor is mul, add__Tensor add_, sum_dim_IntList sum,
 * native_layer_norm itself. */
static bool operator_name(const char *short_name, char *out, size_t len) {
  static const char prefix[] = "at::_ops::", suffix[] = "::call()";
  size_t n = strlen(short_name);
  if (strncmp(short_name, prefix, sizeof prefix - 1) != 0 || n < sizeof prefix + sizeof suffix ||
      strcmp(short_name + n - (sizeof suffix - 1), suffix) != 0)
    return false;
  const char *op = short_name + sizeof prefix - 1;
  size_t oplen = n - (sizeof prefix - 1) - (sizeof suffix - 1);
  if (memchr(op, ':', oplen) || memchr(op, '<', oplen)) return false;
  size_t cut = oplen;
  for (size_t i = 1; i + 1 < oplen && cut == oplen; i++) {
    if (op[i] != '_') continue;
    const char *rest = op + i + 1;
    size_t restlen = oplen - i - 1;
    if (*rest >= 'A' && *rest <= 'Z') cut = i;
    for (size_t k = 0; cut == oplen && k < sizeof lower_overloads / sizeof *lower_overloads; k++) {
      size_t w = strlen(lower_overloads[k]);
      if (restlen >= w && strncmp(rest, lower_overloads[k], w) == 0 && (restlen == w || rest[w] == '_')) cut = i;
    }
  }
  for (size_t k = 0; k < sizeof factories / sizeof *factories; k++)
    if (strlen(factories[k]) == cut && strncmp(op, factories[k], cut) == 0) return false;
  snprintf(out, len, "aten::%.*s", (int)cut, op);
  return true;
}

void ms_frame_short_name(const ms_frame *f, char *out, size_t len) {
  if (f->python) snprintf(out, len, "%s", f->name);
  else if (unnamed(f) && f->module[0]) snprintf(out, len, "0x%llx", (unsigned long long)f->offset); /* in its module */
  else {
    ms_short_name(f->name, out, len);
    size_t n;
    const char *node = node_name(out, &n);
    char op[MS_TEXT_MAX + 8];
    if (node) memmove(out, node, n), out[n] = '\0';
    else if (operator_name(out, op, sizeof op)) snprintf(out, len, "%s", op);
  }
}

bool ms_frame_is_node(const ms_frame *f) {
  if (f->python || unnamed(f)) return false;
  char shown[MS_TEXT_MAX + 8];
  size_t n;
  ms_short_name(f->name, shown, sizeof shown);
  return node_name(shown, &n) != NULL;
}

/* ---- machinery -------------------------------------------------------------------------- */

/* Native frames, by short name. What is left of PyTorch's frames names the operator
 * (at::native::...) and the autograd node (torch::autograd::generated::...Backward0). */
static const char *const builtin_native[] = {
    "c10::*", "torch::unwind::*", "torch::CapturedTraceback*", "torch::cuda::*", "*CUDAPluggableAllocator*",
    "at::detail::*", "at::_ops::*", "at::empty*", "at::native::empty*", "at::(anonymous namespace)::*",
    "at::Tensor*", "at::TensorBase*", "at::TensorIterator*", "at::meta::*", "at::impl::*",
    "torch::autograd::VariableType::*", "torch::autograd::Node::*", "torch::autograd::Engine::*",
    "torch::autograd::python::*", "torch::autograd::THP*", "torch::autograd::impl::*",
    "torch::autograd::validate_outputs*", "torch::ADInplaceOrView::*", "torch::TraceType::*", "torch::jit::*",
    "torch::PythonArgParser*", "torch::utils::*", "torch::autograd::TypeError_to_NotImplemented_*", "memsnap_*", "_Py*", "Py*", "0x*", "ffi_*", "_ctypes*", "std::*",
    "pybind11::*", "cfunction_*", "method_vectorcall*", "__libc_start*", "_start", "start_thread", "__clone*",
    "clone*", "pthread_*", "__pthread*", "__GI_*", "__libc_*",
    "libcudart_static_*" /* the internals of nvcc's static cudart, named by a hash */,
    "*MemsnapAllocator::*" /* memsnap's C++ allocator for PyTorch (recorder/pytorch/), wherever its module is not named */};
/* Native frames of the interpreter and its foreign-function glue, and memsnap's own libraries
 * (libmemsnap, its C++ allocator for PyTorch libmemsnap_torch, its interposer), named or not, by
 * their module's file name. */
static const char *const builtin_modules[] = {"python*", "libpython*", "_ctypes*", "libffi*", "libmemsnap*"};
/* Python frames, as NAME@FILE: memsnap's own package and PyTorch's module-call plumbing. */
static const char *const builtin_python[] = {"*@*/memsnap/*.py", "*@memsnap/*.py", "*_call_impl@*torch/nn/modules/module.py",
                                             "*_call_impl.<locals>.inner@*torch/nn/modules/module.py" /* with global hooks */,
                                             "*_wrapped_call_impl@*torch/nn/modules/module.py"};

/* One list of patterns after a heading, wrapped at 100 columns. */
static void print_list(FILE *out, const char *heading, const char *const *list, size_t n) {
  int column = fprintf(out, "  %s", heading);
  for (size_t i = 0; i < n; i++) {
    if (column + 1 + (int)strlen(list[i]) > 100) column = fprintf(out, "\n   ") - 1;
    column += fprintf(out, " %s", list[i]);
  }
  fprintf(out, "\n");
}

void ms_fold_print_builtin(FILE *out) {
  print_list(out, "native frames:", builtin_native, sizeof builtin_native / sizeof *builtin_native);
  print_list(out, "native frames of the modules:", builtin_modules, sizeof builtin_modules / sizeof *builtin_modules);
  print_list(out, "python frames:", builtin_python, sizeof builtin_python / sizeof *builtin_python);
}

int ms_fold_add(ms_fold *f, const char *list) {
  if (f->n == MS_FOLD_LISTS) return -1;
  f->lists[f->n++] = list;
  return 0;
}

/* A pattern NAME or NAME@FILE (globs) against a frame's short name without its parameter list
 * (`name`), and its source file or its module. */
static bool matches(const char *pattern, const char *name, const ms_frame *f) {
  const char *at = strrchr(pattern, '@');
  if (!at) return fnmatch(pattern, name, 0) == 0;
  char glob[MS_TEXT_MAX + 8];
  snprintf(glob, sizeof glob, "%.*s", (int)(at - pattern), pattern);
  return fnmatch(glob, name, 0) == 0 && (fnmatch(at + 1, f->file, 0) == 0 || (f->module[0] && fnmatch(at + 1, f->module, 0) == 0));
}

/* The frame's short name without its "()", into name[MS_TEXT_MAX + 8]. */
static void pattern_name(const ms_frame *f, char *name) {
  snprintf(name, MS_TEXT_MAX + 8, "%s", f->short_name);
  size_t n = strlen(name);
  if (n > 2 && strcmp(name + n - 2, "()") == 0) name[n - 2] = '\0';
}

bool ms_frame_matches(const char *pattern, const ms_frame *f) {
  char name[MS_TEXT_MAX + 8];
  pattern_name(f, name);
  return matches(pattern, name, f);
}

bool ms_frame_is_machinery(const ms_fold *fold, const ms_frame *f) {
  char name[MS_TEXT_MAX + 8];
  pattern_name(f, name);
  const char *const *builtin = f->python ? builtin_python : builtin_native;
  size_t nbuiltin = f->python ? sizeof builtin_python / sizeof *builtin_python : sizeof builtin_native / sizeof *builtin_native;
  for (size_t i = 0; i < nbuiltin; i++)
    if (matches(builtin[i], name, f)) return true;
  for (size_t i = 0; !f->python && i < sizeof builtin_modules / sizeof *builtin_modules; i++)
    if (fnmatch(builtin_modules[i], base_name(f->module), 0) == 0) return true;
  for (size_t i = 0; fold && i < fold->n; i++)
    for (const char *p = fold->lists[i]; *p;) {
      size_t len = strcspn(p, ",");
      char pattern[1024];
      snprintf(pattern, sizeof pattern, "%.*s", (int)(len < sizeof pattern ? len : sizeof pattern - 1), p);
      if (len && matches(pattern, name, f)) return true;
      p += len + (p[len] == ',');
    }
  return false;
}

size_t ms_stack_frames_that_matter(const ms_snapshot *s, uint32_t stack_id, uint32_t *ids, size_t max) {
  if (stack_id == 0 || stack_id >= s->nstacks) return 0;
  const ms_stack *k = &s->stacks[stack_id];
  bool has_python = false, seen_python = false, have_operator = false;
  uint32_t first = 0; /* an autograd node's frame: the stack starts there, the node named once */
  for (uint32_t i = 0; i < k->depth; i++) has_python |= s->frames[k->frames[i]].python;
  for (uint32_t i = 0; i < k->depth && !first; i++)
    if (s->frames[k->frames[i]].node && !s->frames[k->frames[i]].machinery) first = i + 1;
  size_t n = 0;
  /* inside the node: PyTorch's own operator is the node's work; another library's allocation
     (cuBLAS making its workspace), or PyTorch's CUDA handles and workspaces (at::cuda::), name
     what allocated before the node */
  for (uint32_t i = 0; first && i + 1 < first && n < max; i++) {
    const ms_frame *f = &s->frames[k->frames[i]];
    const char *m = base_name(f->module);
    bool library = m[0] && strncmp(m, "libtorch", 8) != 0 && strncmp(m, "libc10", 6) != 0;
    if (!f->machinery && !f->python && (library || strncmp(f->short_name, "at::cuda::", 10) == 0)) {
      ids[n++] = k->frames[i];
      break;
    }
  }
  for (uint32_t i = first ? first - 1 : 0; i < k->depth && n < max; i++) {
    const ms_frame *f = &s->frames[k->frames[i]];
    seen_python |= f->python;
    if (f->machinery) continue;
    if (first && f->node && i + 1 != first) continue; /* the node's apply and what it calls: one name */
    if (first && !f->python && !f->node && i + 1 > first && has_python) continue; /* then the backward() call */
    if (!f->python && has_python) { /* the operator that allocated, then only Python frames */
      if (seen_python || have_operator) continue;
      have_operator = true;
    }
    ids[n++] = k->frames[i];
  }
  /* Every frame folded (a stripped program): its unnamed frames, else the innermost ones. */
  for (int pass = 0; n == 0 && pass < 2; pass++)
    for (uint32_t i = 0; i < k->depth && n < max; i++)
      if (pass == 1 || unnamed(&s->frames[k->frames[i]])) ids[n++] = k->frames[i];
  return n;
}

/* ---- the program's own code ------------------------------------------------------------ */

/* Libraries, the interpreter and the standard library, by a Python frame's file. */
static const char *const library_files[] = {"*/site-packages/*", "*/dist-packages/*", "*/lib/python3*", "*/lib64/python3*",
                                            "<*",               "*/torch/*",         "*/memsnap/*"};

bool ms_frame_is_program(const ms_frame *f) {
  if (f->machinery) return false;
  if (f->python) {
    for (size_t i = 0; i < sizeof library_files / sizeof *library_files; i++)
      if (fnmatch(library_files[i], f->file, 0) == 0) return false;
    return f->file[0] != '\0';
  }
  const char *slash = strrchr(f->module, '/'), *base = slash ? slash + 1 : f->module;
  return base[0] && !strstr(base, ".so"); /* an executable, not a shared library */
}

/* ---- identity across processes ---------------------------------------------------------- */

int ms_frame_key(const ms_frame *f, char *out, size_t len) {
  if (unnamed(f))
    return snprintf(out, len, "?%s+%llx", base_name(f->module), (unsigned long long)f->offset);
  return snprintf(out, len, "%c%s@%s:%lld%s", f->python ? 'p' : 'n', f->name, f->file, (long long)f->line,
                  f->inlined ? "i" : "");
}
