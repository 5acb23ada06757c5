# Makefile: builds libmemsnap.so and the memsnap CLI, runs the tests and the demo.
#
#   make            build/libmemsnap.so and build/memsnap
#   make test       build and run every test (ends with "N passed, N failed")
#   make sanitize   the tests under ASan+UBSan, the concurrency tests under TSan (docs/RELIABILITY.md)
#   make stress     the concurrency stress at full size: 20 million operations
#   make fuzz       each fuzz target for FUZZ_SECONDS (default 60) with libFuzzer (docs/RELIABILITY.md)
#   make demo       install what is missing, build, run the sample end to end
#   make readme-picture  the README's picture (docs/page.png): the page of a real GPU snapshot, as
#                   the browser tests' screenshot test takes it (docs/testing.md)
#   make deps       install the system packages the build needs (Debian/Ubuntu)
#   make gpu-bench  build what the GPU benchmark needs into build/ (run it with tests/gpu/run.sh)
#   make install    install the library, header, pkg-config file, tool, man page and docs (PREFIX,
#                   DESTDIR); make uninstall removes them; `pip install .` installs the Python package
#   make torch-allocator  compiles the C++ allocator for PyTorch (recorder/pytorch/) against the
#                   PyTorch headers in TORCH_INCLUDE, to check it without PyTorch (memsnap builds it
#                   itself at first use, with the installed PyTorch: recorder/python/memsnap/torch_cxx.py)
#   make phase-timing  a diagnostic library that times each part of a stack capture (TSC ticks in
#                   memsnap.stack_counters()), into build/timing/ (tests/gpu/bench/phase_timing.py)
#
# Dependencies come from the distribution by package name through pkg-config: libunwind,
# sqlite3, libcjson, zlib; and the CUDA toolkit's headers (CUDA_HOME, default /usr/local/cuda).

CC ?= cc
CXX ?= c++
CUDA_HOME ?= /usr/local/cuda
BUILD := build
PKGS := libunwind sqlite3 libcjson zlib
LIB_PKGS := libunwind sqlite3 libcjson # zlib is the CLI's alone (import and export)

OPT ?= -O2
CFLAGS_COMMON := $(OPT) -g -fPIC -fno-semantic-interposition -fexceptions -Wall -Wextra -Wshadow -Wstrict-prototypes \
  -std=gnu11 -D_GNU_SOURCE -Irecorder -Ianalyzer -I$(CUDA_HOME)/include
CXXFLAGS_COMMON := $(OPT) -g -fPIC -Wall -Wextra -std=c++17
EXTRA_CFLAGS ?=
EXTRA_LDFLAGS ?=

# pkg-config is asked only when building, so `make deps` works on a bare machine.
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
LIB_PKG_LIBS = $(shell pkg-config --libs $(LIB_PKGS) 2>/dev/null)

# The library's sources: the foundation and entry points at recorder/'s top, its layers in folders
# (recorder/README.md). Listed in the order they were linked before the folders came: the
# library's constructors (api.c, history/stacks.c, history/unwind.c) run in link order.
LIB_SRCS := recorder/allocator/alloc.c recorder/api.c recorder/modes/async_alloc.c recorder/backends/backend.c recorder/backends/backend_cuda.c recorder/backends/backend_sim.c \
  recorder/allocator/blocks.c recorder/allocator/blocktree.c recorder/modes/capture.c recorder/allocator/check.c recorder/allocator/checkpoint.c recorder/error.c recorder/modes/expandable.c recorder/allocator/external.c recorder/history/gil_helper.c recorder/history/history.c recorder/allocator/devices.c recorder/history/ehframe.c \
  recorder/allocator/ipc.c recorder/history/livefile.c recorder/history/livemap.c recorder/allocator/misuse.c recorder/snapshot/recover.c recorder/snapshot/livestate.c recorder/history/model_events.c recorder/options.c recorder/modes/pools.c recorder/allocator/ptrmap.c recorder/allocator/roles.c recorder/history/process.c recorder/history/pyframes.c recorder/history/runlog.c recorder/allocator/segments.c recorder/snapshot/snapshot.c recorder/history/stacks.c recorder/allocator/stats.c \
  recorder/snapshot/symbolize.c recorder/snapshot/symbols.c recorder/allocator/uncached.c recorder/history/unwind.c
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/recorder/oom_throw.o $(BUILD)/recorder/pytorch/torch_hooks.o
# The analyzer's stages, bottom up (analyzer/README.md): a folder's files call only into their own
# folder and the folders before it.
ANALYZER_STAGES := util read analysis replay report pytorch commands
stage_srcs = $(sort $(wildcard $(addprefix analyzer/,$(addsuffix /*.c,$(1)))))
CLI_SRCS := analyzer/main.c $(call stage_srcs,$(ANALYZER_STAGES))
ANALYZER_HEADERS := $(wildcard analyzer/*/*.h)
WEB_ASSETS := web/viewer.html web/predict.html web/viewer.css web/model.js web/view.js web/predict.js
TEST_BINS := $(BUILD)/tests/test_alloc $(BUILD)/tests/test_modes $(BUILD)/tests/test_host_api $(BUILD)/tests/test_options $(BUILD)/tests/test_stress \
  $(BUILD)/tests/test_record $(BUILD)/tests/gen_snapshots $(BUILD)/tests/test_pickle $(BUILD)/tests/replay_workload $(BUILD)/tests/predict_workload $(BUILD)/tests/shard_events \
  $(BUILD)/tests/gen_ranks $(BUILD)/tests/gen_releases $(BUILD)/tests/gen_runlog $(BUILD)/tests/gen_kept_graphs $(BUILD)/tests/test_stacks $(BUILD)/tests/bench_stacks \
  $(BUILD)/tests/libbench_stacks.so $(BUILD)/tests/libnative_thread.so $(BUILD)/tests/crash_stress $(BUILD)/tests/bench_livestate
SAMPLES := $(BUILD)/samples/train_loop

.PHONY: readme-picture all test test-programs test-web-deps sanitize stress fuzz fuzz-programs demo deps check-deps clean gpu-bench phase-timing regen-golden install uninstall torch-allocator
all: check-deps $(BUILD)/libmemsnap.so $(BUILD)/libmemsnap_intercept.so $(BUILD)/memsnap

check-deps:
	@test -f $(CUDA_HOME)/include/cuda.h || { echo "error: CUDA headers not found in $(CUDA_HOME)/include (install the CUDA toolkit or set CUDA_HOME)"; exit 1; }
	@pkg-config --exists $(PKGS) || { echo "error: missing development packages for: $$(for p in $(PKGS); do pkg-config --exists $$p || printf '%s ' $$p; done)(run 'make deps')"; exit 1; }

$(BUILD)/%.o: %.c recorder/internal.h recorder/history/history.h recorder/history/livemap.h recorder/history/livefile.h recorder/history/runlog.h recorder/snapshot/snapshot_data.h recorder/memsnap.h recorder/snapshot_schema.h $(ANALYZER_HEADERS) | check-deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(PKG_CFLAGS) $(EXTRA_CFLAGS) -c $< -o $@

$(BUILD)/recorder/%.o: recorder/%.cc recorder/memsnap.h
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_COMMON) -Irecorder $(EXTRA_CFLAGS) -c $< -o $@

# rpath $ORIGIN: the library finds libunwind/libcjson copied beside it (the GPU machine has none).
# libgcc_s comes first among the library's dependencies: libunwind.so also exports the _Unwind_*
# functions, and a C++ exception (oom_throw.cc) raised by libgcc_s's unwinder but resumed by
# libunwind's aborts the process. Inside Python (ctypes loads with RTLD_LOCAL) the library's own
# dependency order decides which one its calls reach; tests/recorder/test_oom_throw.py checks it.
GCC_S_FIRST := -Wl,--push-state,--no-as-needed -lgcc_s -Wl,--pop-state
$(BUILD)/libmemsnap.so: $(LIB_OBJS) recorder/libmemsnap.map
	$(CXX) -shared -o $@ $(LIB_OBJS) -Wl,--version-script=recorder/libmemsnap.map \
	  -Wl,-rpath,'$$ORIGIN' $(GCC_S_FIRST) $(LIB_PKG_LIBS) -ldl -lpthread $(EXTRA_LDFLAGS)

# The LD_PRELOAD library of `memsnap run --mode intercept` (intercept/), also its LD_AUDIT library
# (intercept/audit.c, --mode audit): exports the CUDA allocation functions, dlsym, _exit, _Exit and
# the audit interface (la_*); everything else stays local.
INTERCEPT_OBJS := $(BUILD)/intercept/intercept.o $(BUILD)/intercept/audit.o
$(BUILD)/intercept/%.o: intercept/intercept.h
$(BUILD)/libmemsnap_intercept.so: $(INTERCEPT_OBJS) $(BUILD)/libmemsnap.so
	$(CC) -shared -o $@ $(INTERCEPT_OBJS) -L$(BUILD) -lmemsnap -Wl,-rpath,'$$ORIGIN' -ldl -lpthread $(EXTRA_LDFLAGS)

# The page's files, embedded into the CLI as they are (no bundler): symbols _binary_<file>_start/_end.
$(BUILD)/web_assets.o: $(WEB_ASSETS)
	@mkdir -p $(BUILD)
	cd web && ld -r -b binary -z noexecstack -o $(abspath $@) $(notdir $(WEB_ASSETS))

$(BUILD)/memsnap: $(CLI_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/web_assets.o $(BUILD)/libmemsnap.so
	$(CC) -o $@ $(CLI_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/web_assets.o -L$(BUILD) -lmemsnap -Wl,-rpath,'$$ORIGIN' \
	  -Wl,-z,noexecstack $(PKG_LIBS) $(EXTRA_LDFLAGS)

# test_options calls internal parsers: it links their objects instead of the library.
$(BUILD)/tests/test_options: $(BUILD)/tests/test_options.o $(BUILD)/recorder/options.o $(BUILD)/recorder/error.o
	$(CC) -o $@ $^ -lm $(EXTRA_LDFLAGS)

# test_record, test_modes, test_host_api and test_stacks read snapshots back with SQLite.
$(BUILD)/tests/test_record $(BUILD)/tests/test_modes $(BUILD)/tests/test_host_api $(BUILD)/tests/test_stacks: $(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/libmemsnap.so
	$(CC) -o $@ $< -L$(BUILD) -lmemsnap -Wl,-rpath,'$$ORIGIN/..' $$(pkg-config --libs sqlite3) -lpthread -ldl $(EXTRA_LDFLAGS)

# test_pickle runs the importer in process: it links the CLI's pickle and import objects.
IMPORT_OBJS = $(addprefix $(BUILD)/analyzer/pytorch/,import.o import_base.o import_map.o import_intern.o import_stage.o pickle_read.o \
  pickle_write.o) $(BUILD)/analyzer/util/outfile.o
$(BUILD)/tests/test_pickle: tests/analyzer/test_pickle.c tests/testhelper.h $(IMPORT_OBJS)
	$(CC) $(CFLAGS_COMMON) $(PKG_CFLAGS) -Itests $(EXTRA_CFLAGS) -o $@ $< $(IMPORT_OBJS) $(PKG_LIBS) -lm $(EXTRA_LDFLAGS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/libmemsnap.so
	$(CC) -o $@ $< -L$(BUILD) -lmemsnap -Wl,-rpath,'$$ORIGIN/..' -lpthread $(EXTRA_LDFLAGS)

$(BUILD)/samples/%.o: samples/%.c recorder/memsnap.h | check-deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(EXTRA_CFLAGS) -c $< -o $@

$(BUILD)/samples/%: $(BUILD)/samples/%.o $(BUILD)/libmemsnap.so
	$(CC) -o $@ $< -L$(BUILD) -lmemsnap -Wl,-rpath,'$$ORIGIN/..' -lpthread $(EXTRA_LDFLAGS)

# The tests' sources mirror the code's folders (tests/recorder/, tests/analyzer/, tests/intercept/);
# their programs are all built into $(BUILD)/tests/.
TEST_HEADERS := tests/testhelper.h tests/recorder/allochelper.h tests/recorder/dbhelper.h tests/recorder/many_callers.h tests/analyzer/sites.h recorder/memsnap.h recorder/internal.h $(ANALYZER_HEADERS)
$(BUILD)/tests/%.o: tests/recorder/%.c $(TEST_HEADERS) | check-deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -Itests $(EXTRA_CFLAGS) -c $< -o $@
$(BUILD)/tests/%.o: tests/analyzer/%.c $(TEST_HEADERS) | check-deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -Itests $(EXTRA_CFLAGS) -c $< -o $@
$(BUILD)/tests/fuzz/%.o: tests/fuzz/%.c $(TEST_HEADERS) | check-deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(EXTRA_CFLAGS) -c $< -o $@

# The stack benchmark's library for its Python driver (tests/recorder/bench_stacks.py). It does
# not link libmemsnap: its memsnap_* calls go to the one the process loaded (RTLD_GLOBAL), so
# the driver can time another build of the library (MEMSNAP_LIB) with the same code.
$(BUILD)/tests/libbench_stacks.so: tests/recorder/bench_stacks.c tests/recorder/many_callers.h recorder/memsnap.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -DBENCH_LIBRARY $(EXTRA_CFLAGS) -shared -o $@ $< $(EXTRA_LDFLAGS)

# A thread that never ran Python, for the Python tests (tests/recorder/test_torch_model.py).
$(BUILD)/tests/libnative_thread.so: tests/recorder/native_thread.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(EXTRA_CFLAGS) -shared -o $@ $< -lpthread $(EXTRA_LDFLAGS)

# A C++ host that catches memsnap's out-of-memory exception the way PyTorch does.
$(BUILD)/tests/liboom_catcher.so: tests/recorder/oom_catcher.cc $(BUILD)/libmemsnap.so
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_COMMON) -shared -o $@ $< -L$(BUILD) -lmemsnap -Wl,-rpath,'$$ORIGIN/..'

test: test-programs test-web-deps
	@tests/run_tests.sh $(BUILD)

# The page's browser tests drive chromium through playwright-core, an npm package installed into
# this clone (tests/web/node_modules, pinned by tests/web/package-lock.json): installed here when
# missing, so that `make test` alone works in a fresh clone. Without npm the browser tests say
# what is missing and fail; `make deps` installs npm and chromium.
WEB_TEST_DEPS := tests/web/node_modules/playwright-core/package.json
test-web-deps:
	@test -f $(WEB_TEST_DEPS) || { \
	  if command -v npm >/dev/null; then \
	    echo "make: installing playwright-core into tests/web/node_modules for the browser tests (npm ci)"; \
	    cd tests/web && npm ci --no-audit --no-fund --loglevel=error || \
	      echo "make: npm ci failed in tests/web: the browser tests will fail (is the npm registry reachable?)" >&2; \
	  else \
	    echo "make: npm is not installed: the browser tests need it to install playwright-core into tests/web/node_modules (make deps installs it)" >&2; \
	  fi; }

# A plain CUDA program for `memsnap run` (tests/intercept/test_run.sh), linked against the toolkit's
# libcudart.so when the toolkit has one (the tests say they skip it otherwise).
# With it, a library linked the same way that a Python program calls through ctypes
# (tests/intercept/run_steps_lib.c, tests/data/run/steps.py).
RUN_CUDART := $(if $(wildcard $(CUDA_HOME)/lib64/libcudart.so),$(BUILD)/tests/run_cudart $(BUILD)/tests/librun_steps.so)
test-programs: all $(TEST_BINS) $(SAMPLES) $(BUILD)/tests/liboom_catcher.so $(RUN_CUDART)

$(BUILD)/tests/run_cudart: tests/intercept/run_cudart.c | check-deps
	@mkdir -p $(dir $@)
	$(CC) $(OPT) -g -Wall -Wextra -I$(CUDA_HOME)/include $(EXTRA_CFLAGS) -o $@ $< -L$(CUDA_HOME)/lib64 -lcudart \
	  -Wl,-rpath,$(CUDA_HOME)/lib64 -ldl $(EXTRA_LDFLAGS)

$(BUILD)/tests/librun_steps.so: tests/intercept/run_steps_lib.c | check-deps
	@mkdir -p $(dir $@)
	$(CC) $(OPT) -g -fPIC -shared -Wall -Wextra -I$(CUDA_HOME)/include $(EXTRA_CFLAGS) -o $@ $< -L$(CUDA_HOME)/lib64 \
	  -lcudart -Wl,-rpath,$(CUDA_HOME)/lib64 $(EXTRA_LDFLAGS)

# make sanitize: the whole suite built with AddressSanitizer + UndefinedBehaviorSanitizer in
# build-asan/ (any report fails the test that triggered it), then the concurrency stress
# (tests/recorder/test_stress.c: 8 threads allocating, recording, dumping and checking) with
# ThreadSanitizer in build-tsan/. Python loads the instrumented library with the sanitizer's
# runtime preloaded (PY_PRELOAD, read by tests/run_tests.sh).
#
# make stress: the concurrency stress at full size (8 threads x 2.5 million operations), and 100
# kills at random instants of a recorded run, each snapshot recovered (tests/intercept/test_crash.sh).
ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
TSAN_FLAGS := -fsanitize=thread -fno-omit-frame-pointer
stress: test-programs
	THREADS=8 ITER=2500000 KILLS=100 tests/run_tests.sh $(BUILD) stress crash

sanitize:
	@$(MAKE) --no-print-directory BUILD=build-asan EXTRA_CFLAGS="$(ASAN_FLAGS)" EXTRA_LDFLAGS="$(ASAN_FLAGS)" test-programs
	ASAN_OPTIONS=abort_on_error=0:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 MEMSNAP_TESTS_SANITIZER=address \
	  PY_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CXX) -print-file-name=libstdc++.so)" \
	  tests/run_tests.sh build-asan
	@$(MAKE) --no-print-directory BUILD=build-tsan OPT=-O1 EXTRA_CFLAGS="$(TSAN_FLAGS)" EXTRA_LDFLAGS="$(TSAN_FLAGS)" \
	  build-tsan/tests/test_stress
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 tests/run_tests.sh build-tsan stress

# Rewrites the golden reports in tests/analyzer/golden/ from the current build (review the diff).
regen-golden: all $(TEST_BINS)
	REGEN=1 tests/analyzer/test_analyze.sh $(BUILD)

# The README's picture: the page of tests/data/zoo/gpt2_eager-leak.db.xz (GPT-2 with a leak, recorded
# on an H100) at 1280x800, taken by the browser tests' screenshot test into $(BUILD)/web-artifacts.
README_PICTURE := $(BUILD)/web-artifacts/zoo-gpt2_eager-leak-1280x800.png
readme-picture: test-programs test-web-deps
	@rm -f $(README_PICTURE)
	MEMSNAP_BUILD=$(BUILD) node --test --test-name-pattern='real GPU snapshots' tests/web/browser.test.js >/dev/null || \
	  { echo "make: the screenshot test failed (run tests/run_tests.sh $(BUILD) web)" >&2; exit 1; }
	cp $(README_PICTURE) docs/page.png
	@echo "docs/page.png: $$(wc -c <docs/page.png) bytes"

demo: deps
	@$(MAKE) --no-print-directory all $(SAMPLES)
	@scripts/demo.sh $(BUILD)

deps:
	@scripts/install-deps.sh

# tests/gpu/parity/run_modes.py's CUDA C++ program, built by nvcc with its default static cudart (when
# the toolkit has nvcc; for the H100 and H200: sm_90, with PTX for newer GPUs).
NVCC ?= $(CUDA_HOME)/bin/nvcc
RUN_STATIC := $(if $(wildcard $(NVCC)),$(BUILD)/run_static)
# The diagnostic library: MSI_PHASE_TIMING adds the TSC ticks of each part of the captures to the
# stack counters (recorder/history/stacks.c), at the cost of the clock reads. Built in
# build-timing/, then copied into build/timing/ so that a GPU run carries it with build/ (its
# libraries from build/: LD_LIBRARY_PATH).
phase-timing:
	@$(MAKE) --no-print-directory BUILD=build-timing EXTRA_CFLAGS=-DMSI_PHASE_TIMING build-timing/libmemsnap.so
	@mkdir -p $(BUILD)/timing && cp build-timing/libmemsnap.so $(BUILD)/timing/libmemsnap.so

# The C++ allocator for PyTorch (recorder/pytorch/allocator.cpp; the PyTorch-facing room,
# recorder/pytorch/README.md): compiled against a PyTorch's headers, never part of libmemsnap, so its
# object goes to $(BUILD)/torch_allocator/, not among the library's in $(BUILD)/recorder/. This
# target only checks that it compiles (no PyTorch library to link here); TORCH_INCLUDE unset:
# skipped, saying so.
TORCH_INCLUDE ?=
torch-allocator: $(BUILD)/libmemsnap.so
	@if [ -z "$(TORCH_INCLUDE)" ]; then \
	  echo "torch-allocator: skipped: set TORCH_INCLUDE to a PyTorch include directory (site-packages/torch/include)"; \
	else \
	  mkdir -p $(BUILD)/torch_allocator && \
	  echo "$(CXX) ... -c recorder/pytorch/allocator.cpp (against $(TORCH_INCLUDE))" && \
	  $(CXX) -std=c++17 $(OPT) -fPIC -Wall -Wextra -Werror -D_GLIBCXX_USE_CXX11_ABI=1 -isystem $(TORCH_INCLUDE) \
	    -isystem $(TORCH_INCLUDE)/torch/csrc/api/include -isystem $(CUDA_HOME)/include -Irecorder \
	    -c recorder/pytorch/allocator.cpp -o $(BUILD)/torch_allocator/allocator.o; \
	fi

gpu-bench: all $(BUILD)/bench_alloc $(BUILD)/host_costs $(RUN_STATIC)
$(BUILD)/run_static: tests/gpu/parity/run_static.cu
	$(NVCC) -O2 -gencode arch=compute_90,code=[sm_90,compute_90] -o $@ $<
$(BUILD)/bench_alloc: tests/gpu/bench/bench_alloc.c tests/gpu/bench/bench_workload.h $(BUILD)/libmemsnap.so
	$(CC) $(CFLAGS_COMMON) -o $@ $< -L$(BUILD) -lmemsnap -Wl,-rpath,'$$ORIGIN' -lpthread -lm
$(BUILD)/host_costs: tests/gpu/bench/host_costs.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -o $@ $<

# ---- make install / make uninstall ------------------------------------------------------
# make install [PREFIX=/usr/local] [DESTDIR=] [BINDIR= LIBDIR= INCLUDEDIR= DATADIR= MANDIR= DOCDIR=]
# installs libmemsnap.so.VERSION with its soname link libmemsnap.so.MAJOR and the development
# link libmemsnap.so, memsnap.h, memsnap.pc (pkg-config), the memsnap tool (its page assets are
# inside it), the memsnap(1) page made from the tool's help, and the documents. The installed
# library and tool are linked again from the same objects (build/install/): the library with its
# soname, the tool against it with the run path $ORIGIN/<LIBDIR relative to BINDIR>, so they find
# each other wherever the tree is copied (DESTDIR staging too) with no variable set. make
# uninstall removes exactly those files.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
DATADIR ?= $(PREFIX)/share
MANDIR ?= $(DATADIR)/man
DOCDIR ?= $(DATADIR)/doc/memsnap
VERSION := $(shell sed -n 's/^\#define MEMSNAP_VERSION "\(.*\)"/\1/p' recorder/memsnap.h)
SONAME := libmemsnap.so.$(firstword $(subst ., ,$(VERSION)))
INSTALL_DOCS := README.md $(wildcard docs/*.md docs/*.png)

install: all
	@test -n "$(VERSION)" || { echo "error: no MEMSNAP_VERSION in recorder/memsnap.h"; exit 1; }
	@mkdir -p $(BUILD)/install
	$(CXX) -shared -o $(BUILD)/install/libmemsnap.so.$(VERSION) $(LIB_OBJS) -Wl,-soname,$(SONAME) \
	  -Wl,--version-script=recorder/libmemsnap.map $(GCC_S_FIRST) $(LIB_PKG_LIBS) -ldl -lpthread $(EXTRA_LDFLAGS)
	$(CC) -o $(BUILD)/install/memsnap $(CLI_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/web_assets.o \
	  $(BUILD)/install/libmemsnap.so.$(VERSION) -Wl,-rpath,'$$ORIGIN/$(shell realpath -m --relative-to=$(BINDIR) $(LIBDIR))' \
	  -Wl,-z,noexecstack $(PKG_LIBS) $(EXTRA_LDFLAGS)
	scripts/manpage.sh $(BUILD)/memsnap $(VERSION) >$(BUILD)/install/memsnap.1
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' 'includedir=$(INCLUDEDIR)' '' 'Name: memsnap' \
	  'Description: CUDA caching allocator that records memory history (PyTorch pluggable allocator)' \
	  'Version: $(VERSION)' 'Libs: -L$${libdir} -lmemsnap' 'Cflags: -I$${includedir}' >$(BUILD)/install/memsnap.pc
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(DOCDIR)/docs
	install -m 755 $(BUILD)/install/libmemsnap.so.$(VERSION) $(DESTDIR)$(LIBDIR)/
	ln -sf libmemsnap.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libmemsnap.so
	install -m 644 $(BUILD)/install/memsnap.pc $(DESTDIR)$(LIBDIR)/pkgconfig/
	install -m 644 recorder/memsnap.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 755 $(BUILD)/install/memsnap $(DESTDIR)$(BINDIR)/
	install -m 644 $(BUILD)/install/memsnap.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 644 README.md $(DESTDIR)$(DOCDIR)/
	install -m 644 $(wildcard docs/*.md docs/*.png) $(DESTDIR)$(DOCDIR)/docs/

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/memsnap $(DESTDIR)$(LIBDIR)/libmemsnap.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME) \
	  $(DESTDIR)$(LIBDIR)/libmemsnap.so $(DESTDIR)$(LIBDIR)/pkgconfig/memsnap.pc $(DESTDIR)$(INCLUDEDIR)/memsnap.h \
	  $(DESTDIR)$(MANDIR)/man1/memsnap.1 $(addprefix $(DESTDIR)$(DOCDIR)/,$(INSTALL_DOCS))
	-rmdir $(DESTDIR)$(DOCDIR)/docs $(DESTDIR)$(DOCDIR) 2>/dev/null

clean:
	rm -rf $(BUILD)
.SECONDARY:

# make fuzz: the fuzz targets of tests/fuzz/ built with clang's libFuzzer + ASan + UBSan in
# build-fuzz/, each run for FUZZ_SECONDS from its corpus (tests/fuzz/corpus/NAME, kept in the
# repository; what it finds new goes to build-fuzz/corpus/NAME, crashes to build-fuzz/crashes/).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := fuzz_snapshot fuzz_options fuzz_pickle fuzz_livemap
FUZZ_FLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_LINK := -fsanitize=fuzzer,address,undefined
ANALYZER_OBJS = $(patsubst %.c,$(BUILD)/%.o,$(call stage_srcs,util read analysis replay report)) $(BUILD)/web_assets.o

# shard_events prints a history sharded as memsnap predict --shard makes it: it links the analyzer's stages.
$(BUILD)/tests/shard_events: tests/analyzer/shard_events.c $(ANALYZER_OBJS) $(BUILD)/libmemsnap.so
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(PKG_CFLAGS) -Ianalyzer $(EXTRA_CFLAGS) -o $@ $< $(ANALYZER_OBJS) -L$(BUILD) -lmemsnap -Wl,-rpath,'$$ORIGIN/..' $(PKG_LIBS) -lm -lpthread $(EXTRA_LDFLAGS)

fuzz: $(BUILD)/tests/gen_snapshots
	@$(MAKE) --no-print-directory BUILD=build-fuzz CC=clang CXX=clang++ OPT=-O1 EXTRA_CFLAGS="$(FUZZ_FLAGS)" \
	  EXTRA_LDFLAGS="-fsanitize=address,undefined" fuzz-programs
	@GEN_SNAPSHOTS=$(BUILD)/tests/gen_snapshots tests/fuzz/run.sh build-fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

fuzz-programs: $(addprefix $(BUILD)/fuzz/,$(FUZZ_TARGETS))

# fuzz_snapshot replays through libmemsnap (C++ inside: linked by the C++ driver, for UBSan's runtime).
$(BUILD)/fuzz/fuzz_snapshot: $(BUILD)/tests/fuzz/fuzz_snapshot.o $(ANALYZER_OBJS) $(BUILD)/libmemsnap.so
	@mkdir -p $(dir $@)
	$(CXX) $(FUZZ_LINK) -o $@ $(filter %.o,$^) -L$(BUILD) -lmemsnap -Wl,-rpath,'$$ORIGIN/..' $(PKG_LIBS)

# fuzz_livemap reads hostile live mappings through libmemsnap's recover.c (the same C++ driver).
$(BUILD)/fuzz/fuzz_livemap: $(BUILD)/tests/fuzz/fuzz_livemap.o $(BUILD)/libmemsnap.so
	@mkdir -p $(dir $@)
	$(CXX) $(FUZZ_LINK) -o $@ $(filter %.o,$^) -L$(BUILD) -lmemsnap -Wl,-rpath,'$$ORIGIN/..' $(PKG_LIBS)

$(BUILD)/fuzz/fuzz_pickle: $(BUILD)/tests/fuzz/fuzz_pickle.o $(IMPORT_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(FUZZ_LINK) -o $@ $^ $(PKG_LIBS) -lm

$(BUILD)/fuzz/fuzz_options: $(BUILD)/tests/fuzz/fuzz_options.o $(BUILD)/recorder/options.o $(BUILD)/recorder/error.o
	@mkdir -p $(dir $@)
	$(CC) $(FUZZ_LINK) -o $@ $^ -lpthread -lm
