/* model_events.c: what a framework tells the history about its model (memsnap.h, "What a
 * framework tells the history"): modules running forward or backward, tensors seen in their
 * roles, optimizer steps, backward passes. PyTorch's layer of the Python package calls these
 * (recorder/python/memsnap/torch_model.py); docs/snapshot-format.md gives the events' columns.
 *
 * memsnap_tensor_events is api.c's: it checks the tensors here (msi_tensor_events_check), keeps
 * each role for its block's life (roles.c, under the device lock), then adds the events here
 * (msi_tensor_events_add). Each entry point checks its arguments first (a bad one: MEMSNAP_EINVAL, nothing recorded), then
 * adds its events to the ring while the ring records (msi_ring_recording), on the calling thread,
 * as marks are, and for the ring only (a trace observer, PyTorch's recorder, sees the allocator's
 * events, not these). Labels are interned in history.c's table, the one of marks and ranges, and
 * an event names its label by id in `aux`. The ring's fields:
 *   module    aux the label (the module's path), size what (MEMSNAP_MODULE_*), device -1
 *   tensor    addr the storage's data pointer, size the tensor's bytes, requested its role
 *             (MEMSNAP_TENSOR_*), aux the label of its module (0: none), device the tensor's
 *   step      aux the label (the optimizer's class), size what (MEMSNAP_STEP_*), device -1
 *   backward  size 0 begins, 1 ends, device -1; a begin carries the calling thread's stack
 *   gc        size 0 begins, 1 ends, aux the generation, requested the objects collected, addr the
 *             uncollectable ones, device -1 (the Python package's gc.callbacks hook)
 * Only a backward's begin captures a stack; the others carry none.
 *
 * memsnap_backward_begin/end also lend the calling thread's Python frames to the threads that
 * have none (stacks.c: msi_stacks_lend_push / msi_stacks_lend_pop), whether the ring records or
 * not, so that begins and ends stay paired if recording starts or stops between them.
 *
 * Steps and tensors also go to the run log (runlog.c: an iteration ends with a step, the roles'
 * bytes at each iteration's peak), whether the ring records or not.
 *
 * None of this is on the allocation path: these calls take the label table's lock and may
 * allocate (a label's first use, a stack's first capture).
 */
#include "history.h"
#include "internal.h"
#include "runlog.h"

/* Whether `label` is an id memsnap_label gave (0, none, only where `none_ok`) among the `count`
 * interned; false with the error said. */
static bool label_ok(const char *fn, int label, bool none_ok, uint32_t count) {
  if (label == 0 && none_ok) return true;
  if (label > 0 && (uint32_t)label < count) return true;
  msi_error("%s: %d is not a label id that memsnap_label gave", fn, label);
  return false;
}

int memsnap_label(const char *text) {
  if (!text || !*text) {
    msi_error("memsnap_label: %s text", text ? "an empty" : "no");
    return MEMSNAP_EINVAL;
  }
  uint32_t id = msi_label_id(text);
  if (id == UINT32_MAX) {
    msi_error("memsnap_label: out of host memory");
    return MEMSNAP_ENOMEM;
  }
  if (id > (uint32_t)INT32_MAX) {
    msi_error("memsnap_label: more labels than an int counts");
    return MEMSNAP_ENOMEM;
  }
  return (int)id;
}

int memsnap_module_event(int label, int what) {
  if (what < MEMSNAP_MODULE_FORWARD || what > MEMSNAP_MODULE_BACKWARD_END) {
    msi_error("memsnap_module_event: what %d is not a MEMSNAP_MODULE_* (0 to 3)", what);
    return MEMSNAP_EINVAL;
  }
  if (!label_ok("memsnap_module_event", label, false, msi_label_count())) return MEMSNAP_EINVAL;
  if (msi_ring_recording())
    msi_history_add_unobserved(MSI_EV_MODULE, -1, NULL, 0, (uint64_t)what, 0, (uint64_t)label, 0);
  return MEMSNAP_OK;
}

int msi_tensor_events_check(size_t n, const uint64_t *storage, const uint64_t *bytes, const uint8_t *role,
                            const int32_t *label, const int16_t *device) {
  if (n == 0) return MEMSNAP_OK;
  if (!storage || !bytes || !role || !label || !device) {
    msi_error("memsnap_tensor_events: %zu tensors without their arrays", n);
    return MEMSNAP_EINVAL;
  }
  uint32_t count = msi_label_count();
  for (size_t i = 0; i < n; i++) { /* every tensor checked before any is recorded */
    if (role[i] < MEMSNAP_TENSOR_PARAMETER || role[i] > MEMSNAP_TENSOR_BUFFER) {
      msi_error("memsnap_tensor_events: tensor %zu: role %d is not a MEMSNAP_TENSOR_* (1 to 4)", i, role[i]);
      return MEMSNAP_EINVAL;
    }
    if (device[i] < -1 || device[i] >= MSI_MAX_DEVICES) {
      msi_error("memsnap_tensor_events: tensor %zu: device %d is not a device", i, device[i]);
      return MEMSNAP_EINVAL;
    }
    if (!label_ok("memsnap_tensor_events", label[i], true, count)) return MEMSNAP_EINVAL;
  }
  return MEMSNAP_OK;
}

void msi_tensor_events_add(size_t n, const uint64_t *storage, const uint64_t *bytes, const uint8_t *role,
                           const int32_t *label, const int16_t *device) {
  if (!msi_ring_recording()) return;
  for (size_t i = 0; i < n; i++)
    msi_history_add_unobserved(MSI_EV_TENSOR, device[i], NULL, (uintptr_t)storage[i], bytes[i], role[i],
                               (uint64_t)label[i], 0);
}

int msi_step_event(int label, int what) {
  if (what < MEMSNAP_STEP_BEGIN || what > MEMSNAP_STEP_SKIPPED) {
    msi_error("memsnap_step_event: what %d is not a MEMSNAP_STEP_* (1 to 3)", what);
    return MEMSNAP_EINVAL;
  }
  if (!label_ok("memsnap_step_event", label, false, msi_label_count())) return MEMSNAP_EINVAL;
  msi_runlog_step(label, what); /* an iteration's end for the run log (runlog.c) */
  if (msi_ring_recording())
    msi_history_add_unobserved(MSI_EV_STEP, -1, NULL, 0, (uint64_t)what, 0, (uint64_t)label, 0);
  return MEMSNAP_OK;
}

int memsnap_backward_begin(void) {
  bool recording = msi_ring_recording();
  uint32_t stack = recording ? msi_stack_capture() : 0;
  msi_stacks_lend_push(recording);
  if (recording) msi_history_add_unobserved(MSI_EV_BACKWARD, -1, NULL, 0, 0, 0, 0, stack);
  return MEMSNAP_OK;
}

int memsnap_backward_end(void) {
  if (msi_stacks_lend_pop() != 0) {
    msi_error("memsnap_backward_end without a matching memsnap_backward_begin");
    return MEMSNAP_EINVAL;
  }
  if (msi_ring_recording()) msi_history_add_unobserved(MSI_EV_BACKWARD, -1, NULL, 0, 1, 0, 0, 0);
  return MEMSNAP_OK;
}

int memsnap_gc_event(int what, int generation, int64_t collected, int64_t uncollectable) {
  if (what != 0 && what != 1) {
    msi_error("memsnap_gc_event: what %d is not 0 (begins) or 1 (ends)", what);
    return MEMSNAP_EINVAL;
  }
  if (generation < 0 || generation > 2) {
    msi_error("memsnap_gc_event: generation %d is not 0, 1 or 2", generation);
    return MEMSNAP_EINVAL;
  }
  if (msi_ring_recording())
    msi_history_add_unobserved(MSI_EV_GC, -1, NULL, (uint64_t)(uncollectable > 0 ? uncollectable : 0),
                               (uint64_t)what, (uint64_t)(collected > 0 ? collected : 0), (uint64_t)generation, 0);
  return MEMSNAP_OK;
}
