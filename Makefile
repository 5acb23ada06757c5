# Makefile: builds libmemsnap.so and the memsnap CLI, runs the tests and the demo.
#
#   make            build/libmemsnap.so and build/memsnap
#   make test       build and run every test (ends with "N passed, N failed")
#   make demo       install what is missing, build, run the sample end to end
#   make deps       install the system packages the build needs (Debian/Ubuntu)
#   make gpu-bench  build what the GPU benchmark needs into build/ (run it with tests/gpu/run.sh)
#   make fuzz       build the importer's libFuzzer target (clang) into build/fuzz/
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
  -std=gnu11 -D_GNU_SOURCE -Irecorder -I$(CUDA_HOME)/include
CXXFLAGS_COMMON := $(OPT) -g -fPIC -Wall -Wextra -std=c++17
EXTRA_CFLAGS ?=
EXTRA_LDFLAGS ?=

# pkg-config is asked only when building, so `make deps` works on a bare machine.
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
LIB_PKG_LIBS = $(shell pkg-config --libs $(LIB_PKGS) 2>/dev/null)

LIB_SRCS := recorder/alloc.c recorder/api.c recorder/backend_cuda.c recorder/backend_sim.c \
  recorder/blocktree.c recorder/check.c recorder/error.c recorder/history.c recorder/options.c \
  recorder/ptrmap.c recorder/snapshot.c recorder/stacks.c recorder/stats.c recorder/symbols.c
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/recorder/oom_throw.o
CLI_SRCS := analyzer/main.c analyzer/reader.c analyzer/analysis.c analyzer/report.c analyzer/cmd_info.c \
  analyzer/cmd_analyze.c analyzer/cmd_diff.c analyzer/html.c analyzer/outfile.c analyzer/pickle.c \
  analyzer/import.c analyzer/cmd_import.c analyzer/cmd_export.c
WEB_ASSETS := web/viewer.html web/viewer.css web/model.js web/view.js
TEST_BINS := $(BUILD)/tests/test_alloc $(BUILD)/tests/test_options $(BUILD)/tests/test_stress \
  $(BUILD)/tests/test_record $(BUILD)/tests/gen_snapshots $(BUILD)/tests/test_pickle
SAMPLES := $(BUILD)/samples/train_loop

.PHONY: all test demo deps check-deps clean gpu-bench regen-golden fuzz
all: check-deps $(BUILD)/libmemsnap.so $(BUILD)/memsnap

check-deps:
	@test -f $(CUDA_HOME)/include/cuda.h || { echo "error: CUDA headers not found in $(CUDA_HOME)/include (install the CUDA toolkit or set CUDA_HOME)"; exit 1; }
	@pkg-config --exists $(PKGS) || { echo "error: missing development packages for: $$(for p in $(PKGS); do pkg-config --exists $$p || printf '%s ' $$p; done)(run 'make deps')"; exit 1; }

$(BUILD)/%.o: %.c recorder/internal.h recorder/memsnap.h recorder/snapshot_schema.h analyzer/analyzer.h analyzer/commands.h \
  analyzer/pickle.h | check-deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(PKG_CFLAGS) $(EXTRA_CFLAGS) -c $< -o $@

$(BUILD)/recorder/oom_throw.o: recorder/oom_throw.cc
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_COMMON) $(EXTRA_CFLAGS) -c $< -o $@

# rpath $ORIGIN: the library finds libunwind/libcjson copied beside it (the GPU machine has none).
# libgcc_s comes first among the library's dependencies: libunwind.so also exports the _Unwind_*
# functions, and a C++ exception (oom_throw.cc) raised by libgcc_s's unwinder but resumed by
# libunwind's aborts the process. Inside Python (ctypes loads with RTLD_LOCAL) the library's own
# dependency order decides which one its calls reach; tests/test_oom_throw.py checks it.
GCC_S_FIRST := -Wl,--push-state,--no-as-needed -lgcc_s -Wl,--pop-state
$(BUILD)/libmemsnap.so: $(LIB_OBJS) recorder/libmemsnap.map
	$(CXX) -shared -o $@ $(LIB_OBJS) -Wl,--version-script=recorder/libmemsnap.map \
	  -Wl,-rpath,'$$ORIGIN' $(GCC_S_FIRST) $(LIB_PKG_LIBS) -ldl -lpthread $(EXTRA_LDFLAGS)

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

# test_record reads snapshots back with SQLite.
$(BUILD)/tests/test_record: $(BUILD)/tests/test_record.o $(BUILD)/libmemsnap.so
	$(CC) -o $@ $< -L$(BUILD) -lmemsnap -Wl,-rpath,'$$ORIGIN/..' $$(pkg-config --libs sqlite3) -lpthread $(EXTRA_LDFLAGS)

# test_pickle runs the importer in process: it links the CLI's pickle and import objects.
$(BUILD)/tests/test_pickle: tests/test_pickle.c tests/testhelper.h $(BUILD)/analyzer/import.o $(BUILD)/analyzer/pickle.o
	$(CC) $(CFLAGS_COMMON) $(PKG_CFLAGS) -Ianalyzer $(EXTRA_CFLAGS) -o $@ $< $(BUILD)/analyzer/import.o \
	  $(BUILD)/analyzer/pickle.o $(PKG_LIBS) -lm $(EXTRA_LDFLAGS)

# The importer under libFuzzer with ASan and UBSan: build/fuzz/fuzz_pickle build/fuzz/corpus
FUZZ_SRCS := tests/fuzz/fuzz_pickle.c analyzer/import.c analyzer/pickle.c
fuzz: check-deps $(BUILD)/fuzz/fuzz_pickle
$(BUILD)/fuzz/fuzz_pickle: $(FUZZ_SRCS) analyzer/pickle.h analyzer/analyzer.h recorder/snapshot_schema.h
	@mkdir -p $(BUILD)/fuzz/corpus
	clang -g -O1 -fsanitize=fuzzer,address,undefined -std=gnu11 -D_GNU_SOURCE -Irecorder -Ianalyzer \
	  -I$(CUDA_HOME)/include $(PKG_CFLAGS) -o $@ $(FUZZ_SRCS) $(PKG_LIBS) -lm
	@for f in ../shared/snapshots/*.pickle.gz; do [ -f "$$f" ] && gzip -dc "$$f" >$(BUILD)/fuzz/corpus/$$(basename $$f .gz); done; true

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/libmemsnap.so
	$(CC) -o $@ $< -L$(BUILD) -lmemsnap -Wl,-rpath,'$$ORIGIN/..' -lpthread $(EXTRA_LDFLAGS)

$(BUILD)/samples/%.o: samples/%.c recorder/memsnap.h | check-deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(EXTRA_CFLAGS) -c $< -o $@

$(BUILD)/samples/%: $(BUILD)/samples/%.o $(BUILD)/libmemsnap.so
	$(CC) -o $@ $< -L$(BUILD) -lmemsnap -Wl,-rpath,'$$ORIGIN/..' -lpthread $(EXTRA_LDFLAGS)

$(BUILD)/tests/%.o: tests/%.c tests/testhelper.h recorder/memsnap.h recorder/internal.h | check-deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(EXTRA_CFLAGS) -c $< -o $@

# A C++ host that catches memsnap's out-of-memory exception the way PyTorch does.
$(BUILD)/tests/liboom_catcher.so: tests/oom_catcher.cc $(BUILD)/libmemsnap.so
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_COMMON) -shared -o $@ $< -L$(BUILD) -lmemsnap -Wl,-rpath,'$$ORIGIN/..'

test: all $(TEST_BINS) $(SAMPLES) $(BUILD)/tests/liboom_catcher.so
	@tests/run_tests.sh $(BUILD)

# Rewrites the golden reports in tests/golden/ from the current build (review the diff).
regen-golden: all $(TEST_BINS)
	REGEN=1 tests/test_analyze.sh $(BUILD)

demo: deps
	@$(MAKE) --no-print-directory all $(SAMPLES)
	@scripts/demo.sh $(BUILD)

deps:
	@scripts/install-deps.sh

gpu-bench: all $(BUILD)/bench_alloc
$(BUILD)/bench_alloc: tests/gpu/bench_alloc.c tests/gpu/bench_workload.h $(BUILD)/libmemsnap.so
	$(CC) $(CFLAGS_COMMON) -o $@ $< -L$(BUILD) -lmemsnap -Wl,-rpath,'$$ORIGIN' -lpthread -lm

clean:
	rm -rf $(BUILD)
.SECONDARY:
