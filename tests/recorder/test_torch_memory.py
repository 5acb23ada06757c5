"""test_torch_memory.py: torch.cuda.memory's public functions under memsnap, against the stand-in
for PyTorch (tests/data/fake_torch, which mirrors PyTorch 2.11's layering: public function ->
torch._C binding -> the current allocator, whose pluggable form refuses what PyTorch's refuses)
on the simulated device (issue 24).

First tests/gpu/parity/parity_memory_api.py runs here as it runs on the GPU: each function under the
stand-in's native allocator, under memsnap.enable() and under a bare pluggable allocator, for
backend native and backend:cudaMallocAsync; its answers are checked one by one. Then what the
answers are built from: memsnap's options read back, the memory fraction, the pool's use count,
clearing the history, peer access to expandable segments and the async pool of two simulated
devices, and PyTorch's statistics without memsnap's own key.
"""
import json
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
tests = os.path.join(here, "..")
sys.path.insert(0, tests)
from checks import check, finish  # noqa: E402

fake = os.path.join(tests, "data", "fake_torch")
env = dict(os.environ, MEMSNAP_BACKEND="sim", MEMSNAP_SIM_CAPACITY="4G", FAKE_TORCH_DEVICE_MEMORY="4G",
           PYTHONPATH=os.pathsep.join([fake, os.environ.get("PYTHONPATH", "")]), PYTORCH_CUDA_ALLOC_CONF="",
           # the stand-in calls memsnap_malloc through ctypes, which a C++ exception cannot cross:
           # out of memory returns NULL, and the stand-in raises (PyTorch catches memsnap's throw)
           MEMSNAP_OOM="null")
out = tempfile.mktemp(suffix=".json")
p = subprocess.run([sys.executable, os.path.join(tests, "gpu", "parity", "parity_memory_api.py"), "--json", out], env=env,
                   capture_output=True, text=True, timeout=300)
check("parity script: runs against the stand-in and prints its table last",
      p.returncode == 0 and "answers the same under memsnap as native" in p.stdout.splitlines()[-1], p.stderr[-2000:])
r = json.load(open(out)) if os.path.exists(out) else {}
os.unlink(out) if os.path.exists(out) else None
nat, ms, bare = (r.get("native", {}).get(a, {}) for a in ("native", "memsnap", "pluggable"))
anat, ams = (r.get("cudaMallocAsync", {}).get(a, {}) for a in ("native", "memsnap"))


def same(name, *pairs):
    for n, m in pairs:
        if n.get(name) != m.get(name) or n.get(name) is None:
            return False
    return True


both = [(nat, ms), (anat, ams)]
for name in ("memory_allocated", "max_memory_allocated", "memory_stats keys", "memory_stats_as_nested_dict",
             "reset_peak_memory_stats", "reset_max_memory_allocated", "memory_summary",
             "set/get_per_process_memory_fraction", "caching_allocator_alloc/delete", "get_allocator_backend",
             "host_memory_stats", "list_gpu_processes", "empty_cache"):
    check("parity: %s answers as native, both backends" % name, same(name, *both),
          [(n.get(name), m.get(name)) for n, m in both])
check("parity: 122 statistics under memsnap for either backend, memsnap's num_invalid_frees left out",
      len(ms.get("memory_stats keys", [])) == 122 and len(ams.get("memory_stats keys", [])) == 122 and
      "num_invalid_frees" not in ms.get("memory_stats keys", []))
check("parity: the backend's name is native / cudaMallocAsync, not pluggable",
      ms.get("get_allocator_backend") == "native" and ams.get("get_allocator_backend") == "cudaMallocAsync" and
      bare.get("get_allocator_backend") == "pluggable")
check("parity: the async backend's statistics are its pool's (the rest zero, as native's)",
      ams.get("memory_stats values", {}).get("segment.all.current") == 0 and
      ams.get("memory_stats values", {}).get("allocated_bytes.all.current") == anat.get(
          "memory_stats values", {}).get("allocated_bytes.all.current"))
snap_n, snap_m = nat.get("memory_snapshot", {}), ms.get("memory_snapshot", {})
check("parity: memory_snapshot() gives PyTorch's segment and block dicts, the allocated blocks summing to "
      "memory_allocated()",
      isinstance(snap_m, dict) and snap_m.get("segment keys") == snap_n.get("segment keys") and
      snap_m.get("block keys") == snap_n.get("block keys") and snap_m.get("allocated = sum of active_allocated blocks"),
      (snap_n, snap_m))
h_n, h_m = nat.get("_record_memory_history + _snapshot", {}), ms.get("_record_memory_history + _snapshot", {})
check("parity: _record_memory_history + _snapshot: the same keys, trace entry keys and allocator settings, with frames",
      isinstance(h_m, dict) and all(h_m.get(k) == h_n.get(k) for k in ("keys", "trace keys", "settings keys")) and
      h_m.get("alloc has frames") and {"alloc", "free_requested", "free_completed"} <= set(
          h_m.get("actions", [])), (h_n, h_m))
check("parity: _dump_snapshot writes a pickle with _snapshot's keys", same("_dump_snapshot", (nat, ms)))
pool = ms.get("MemPool + use_mem_pool + snapshot", {})
check("parity: MemPool.snapshot() lists the pool's segments only, use_count as native",
      same("MemPool + use_mem_pool + snapshot", (nat, ms)) and pool.get("segments") == 1 and pool.get("all of the pool"),
      (nat.get("MemPool + use_mem_pool + snapshot"), pool))
segments = {"segment_alloc", "segment_free"}  # the stand-in's native does not cache: a segment per tensor
check("parity: _record_memory_history + _snapshot: the trace's actions are native's (no entry for the dump "
      "memsnap writes to answer)", set(h_m.get("actions") or ["?"]) - segments == set(h_n.get("actions") or []) - segments,
      (h_n.get("actions"), h_m.get("actions")))
for name, refusal in (("memory_snapshot", "Calling snapshot with backend:cudaMallocAsync"),
                      ("_dump_snapshot", "Calling snapshot with backend:cudaMallocAsync"),
                      ("MemPool + use_mem_pool + snapshot", "cudaMallocAsync does not yet support createOrIncrefPool"),
                      ("_cuda_attach_out_of_memory_observer",
                       "cudaMallocAsync does not yet support attachOutOfMemoryObserver"),
                      ("out-of-memory observer called", "cudaMallocAsync does not yet support attachOutOfMemoryObserver")):
    check("parity: with backend:cudaMallocAsync, %s is refused as native refuses it" % name,
          str(ams.get(name, "")).startswith("error: RuntimeError: " + refusal) and
          str(anat.get(name, "")).startswith("error: RuntimeError: " + refusal),
          (anat.get(name), ams.get(name)))
obs_n, obs_m = nat.get("out-of-memory observer called", {}), ms.get("out-of-memory observer called", {})
check("parity: an out-of-memory observer is attached and called as native calls it: once, device 0, the size "
      "asked, the card's total, its free bytes",
      ms.get("_cuda_attach_out_of_memory_observer") == "ok" and obs_m == obs_n and
      obs_m == {"calls": 1, "device": 0, "size asked": True, "total is the card's": True, "free <= total": True},
      (obs_n, obs_m))
check("parity: with backend:cudaMallocAsync, _record_memory_history is refused as native refuses it",
      str(ams.get("_record_memory_history + _snapshot", "")).startswith(
          str(anat.get("_record_memory_history + _snapshot", "?"))[:60]))
check("parity: IPC of a tensor is refused by the pluggable interface itself (no hook reaches memsnap)",
      nat.get("IPC: storage._share_cuda_") == "tuple" and
      ms.get("IPC: storage._share_cuda_", "").startswith("error: RuntimeError: CUDAPluggableAllocator does not yet "
                                                          "support shareIPcHandle"))
refused = [k for k, v in bare.items() if str(v).startswith("error: RuntimeError: CUDAPluggableAllocator does not yet")]
check("parity: without memsnap's answers a bare pluggable allocator refuses the statistics, snapshots and history",
      {"memory_allocated", "memory_stats keys", "_record_memory_history + _snapshot",
       "set/get_per_process_memory_fraction"} <= set(refused), refused)

# caching_allocator_enable(False) and PYTORCH_NO_CUDA_MEMORY_CACHING=1 turn the cache off, as in
# PyTorch's own allocator: each tensor a device allocation of its own, outside the statistics
NO_CACHE = r"""
import memsnap
memsnap.enable()
import torch
torch.cuda.init()
started = memsnap.caching()
torch.cuda.memory.caching_allocator_enable(True)
a = torch.empty(1 << 20, device="cuda")
cached = torch.cuda.memory_allocated()
torch.cuda.memory.caching_allocator_enable(False)
b = torch.empty(1 << 20, device="cuda")
print(started, memsnap.caching(), cached, torch.cuda.memory_allocated())
del a, b
"""
for no_cache in (None, "0", "1"):
    wenv = dict(env, PYTHONPATH=os.pathsep.join([fake, os.path.join(tests, "..", "recorder", "python")]))
    wenv.pop("PYTORCH_NO_CUDA_MEMORY_CACHING", None)
    if no_cache:
        wenv["PYTORCH_NO_CUDA_MEMORY_CACHING"] = no_cache
    w = subprocess.run([sys.executable, "-c", NO_CACHE], env=wenv, capture_output=True, text=True, timeout=60)
    fields = w.stdout.split()
    if no_cache != "1":
        check("caching_allocator_enable(False) turns the cache off: the next tensor is outside the statistics "
              "(PYTORCH_NO_CUDA_MEMORY_CACHING=%s)" % no_cache,
              w.returncode == 0 and fields == ["True", "False", str(1 << 20), str(1 << 20)], w.stdout + w.stderr[-1500:])
    else:
        check("PYTORCH_NO_CUDA_MEMORY_CACHING=1: the cache is off (PyTorch's check_env), whatever "
              "caching_allocator_enable says", w.returncode == 0 and fields == ["False", "False", "0", "0"],
              w.stdout + w.stderr[-1500:])

# ---- what the answers are built from, on the simulated device -----------------------------------
os.environ.update(MEMSNAP_BACKEND="sim", MEMSNAP_SIM_CAPACITY="1G", MEMSNAP_SIM_DEVICES="2",
                  MEMSNAP_EXPANDABLE_SEGMENTS="1", PYTORCH_CUDA_ALLOC_CONF="")
import memsnap  # noqa: E402
from memsnap import torch_memory  # noqa: E402

check("get_option: effective values (the environment's, the defaults)",
      memsnap.get_option("expandable_segments") == "1" and memsnap.get_option("MEMSNAP_ALLOCATOR") == "native" and
      memsnap.get_option("peer_access") == "1")
try:
    memsnap.get_option("no_such_option")
    check("get_option: an unknown name raises, naming it", False)
except memsnap.MemsnapError as e:
    check("get_option: an unknown name raises, naming it", "no_such_option" in str(e))
check("get_memory_fraction: 1.0 without a cap, then the cap as set", memsnap.get_memory_fraction(1) == 1.0)
memsnap.set_memory_fraction(0.25, 1)
check("get_memory_fraction: the cap as set (0.25 of 1 GiB)", memsnap.get_memory_fraction(1) == 0.25)
memsnap.set_memory_fraction(1.0, 1)
check("stats for torch: PyTorch's keys only; memsnap.memory_stats keeps num_invalid_frees",
      "num_invalid_frees" not in torch_memory.stats_for_torch(0) and "num_invalid_frees" in memsnap.memory_stats(0))

# peer access: expandable pages of device 0 for device 1 (MEMSNAP_PEER_ACCESS=1, the default)
p0 = memsnap.malloc(3 << 20, device=0)
check("peer access: an expandable segment's page is mapped for the other device", memsnap.sim_peer_access(1, p0) and
      memsnap.sim_peer_access(0, p0))
memsnap.free(p0)
memsnap.shutdown()
os.environ.update(MEMSNAP_PEER_ACCESS="0")
p0 = memsnap.malloc(3 << 20, device=0)
check("peer access: MEMSNAP_PEER_ACCESS=0 maps it for its own device only",
      not memsnap.sim_peer_access(1, p0) and memsnap.sim_peer_access(0, p0))
memsnap.free(p0)
memsnap.shutdown()
os.environ.update(MEMSNAP_PEER_ACCESS="1", MEMSNAP_EXPANDABLE_SEGMENTS="0", MEMSNAP_ALLOCATOR="async")
p1 = memsnap.malloc(1 << 20, device=1)
check("peer access: the async pool of device 1 is open to device 0", memsnap.sim_peer_access(0, p1))
memsnap.free(p1)
memsnap.shutdown()
os.environ.update(MEMSNAP_ALLOCATOR="native")
p0 = memsnap.malloc(1 << 20, device=0)
check("peer access: a classic segment is reachable through the context's peer access", memsnap.sim_peer_access(1, p0))
try:
    memsnap.sim_peer_access(0, 0x1234)
    check("peer access: an address of no device raises", False)
except memsnap.MemsnapError as e:
    check("peer access: an address of no device raises", "no simulated device" in str(e))
memsnap.free(p0)

# the history: clear_history forgets what was recorded, recording goes on
memsnap.record(max_entries=100)
memsnap.free(memsnap.malloc(4096))
memsnap.clear_recording()
q = memsnap.malloc(8192)
tr = torch_memory.snapshot()["device_traces"][0]
check("record_clear: only what came after it is in the trace",
      [e["action"] for e in tr if e["action"] in ("alloc", "free_requested")] == ["alloc"] and tr[0]["size"] == 8192,
      [e["action"] for e in tr])
memsnap.free(q)
memsnap.stop_recording()

# a pool's use count
pool_id = (0, 77)
memsnap.load().memsnap_create_pool(0, *pool_id)
memsnap.load().memsnap_begin_allocate_thread_to_pool(0, *pool_id)
check("pool use count: a MemPool and a use_mem_pool block", memsnap.load().memsnap_pool_use_count(0, *pool_id) == 2)
memsnap.load().memsnap_end_allocate_to_pool(0, *pool_id)
memsnap.load().memsnap_release_pool(0, *pool_id)
check("pool use count: the MemPool alone", memsnap.load().memsnap_pool_use_count(0, *pool_id) == 1)
check("pool use count: an unknown pool is an error", memsnap.load().memsnap_pool_use_count(0, 0, 12345) < 0)

# out-of-memory observers (torch._C._cuda_attach_out_of_memory_observer): device 1 has 1 GiB
seen = []
dump = tempfile.mktemp(suffix=".db")


def observer(device, size, total, free):
    seen.append((device, size, total, free))
    memsnap.dump(dump)  # PyTorch's recipe: a snapshot from the observer (takes the allocator's locks)


def failing(*args):
    raise ValueError("an observer that fails")


memsnap.add_oom_observer(failing)
memsnap.add_oom_observer(observer)
try:
    memsnap.malloc(3 << 30, device=1)
    check("oom observer: 3 GiB on a 1 GiB device fails", False)
except MemoryError as e:
    check("oom observer: the error stays the out-of-memory message after the observers ran",
          "CUDA out of memory. Tried to allocate 3.00 GiB" in str(e), str(e))
check("oom observer: called once after a failing observer, with the device, the size, the device's total and free",
      len(seen) == 1 and seen[0][:3] == (1, 3 << 30, 1 << 30) and 0 < seen[0][3] <= 1 << 30, seen)
check("oom observer: it could write a snapshot", os.path.exists(dump) and os.path.getsize(dump) > 0)
os.path.exists(dump) and os.unlink(dump)
memsnap.set_memory_fraction(0.5, 1)
try:
    memsnap.malloc(700 << 20, device=1)
except MemoryError:
    pass
check("oom observer: under a memory fraction the total is the allowed maximum (PyTorch's argument)",
      len(seen) == 2 and seen[1][1:3] == (700 << 20, 512 << 20), seen)
memsnap.set_memory_fraction(1.0, 1)
small = memsnap.malloc(1 << 20, device=1)
check("oom observer: not called when the allocation succeeds", len(seen) == 2)
memsnap.free(small)
try:
    memsnap.add_oom_observer(None)
    check("oom observer: a non-callable is refused", False)
except TypeError:
    check("oom observer: a non-callable is refused", True)
finish()
