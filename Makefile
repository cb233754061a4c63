# flightrec — every build, test and benchmark target.
#
#   make            build build/libflightrec.so and the test programs
#   make deps       install the Debian packages the build, tests and tools need
#   make demo       run the bundled demo service under the preload and dump its trace
#   make test       deps + build + unit tests + sanitizer unit tests + integration tests
#   make test-fast  build + unit tests + integration tests not marked slow (no sanitizers)
#   make bench      benchmarks (never part of make test)
#   make install    PREFIX=/usr/local, honours DESTDIR
#
# Sources are found by directory so a new file needs no Makefile edit:
#   every *.cc under format/ sampler/ uploader/ preload/ -> libflightrec.so
#   the same minus the interposers (any hook_*.cc, preload/runtime/lifecycle.cc)
#                                                         -> build/libflightrec_core.a (unit tests)
#   tests/unit/*.cc                                       -> build/unit_tests (doctest)
#   tests/programs/*.c|*.cc                               -> build/programs/NAME
#   tests/preloads/*.c                                    -> build/preloads/NAME.so (test-only shims)
#   tests/programs/plugins/*.cc (C++ plugins to dlopen)   -> build/programs/libNAME.so
#   tests/integration/test_*.py                           -> pytest
#
# Tests, the demo and benchmarks talk to loopback only. AWS_EC2_METADATA_DISABLED
# is exported for every target, so nothing run from here (the uploader, botocore
# in flightrec-dump or the tests) ever asks the instance metadata address
# 169.254.169.254; tests that exercise a credential provider point it at a
# loopback stand-in explicitly.
export AWS_EC2_METADATA_DISABLED := true

PREFIX   ?= /usr/local
DESTDIR  ?=
BUILD    ?= build
CXX      ?= g++
CC       ?= gcc
PYTHON   := /usr/bin/python3

WARN     := -Wall -Wextra -Werror
CXXFLAGS_BASE := -std=c++20 -O2 -g $(WARN) -fPIC -pthread -I. -D_GNU_SOURCE
# A section per function and object, so the link drops what nothing calls
# (--gc-sections): a smaller library for every process to map and relocate.
LIB_CXXFLAGS  := $(CXXFLAGS_BASE) -fvisibility=hidden -ffunction-sections -fdata-sections
# libgcc_s is named before libunwind on purpose: the preload's dependencies join the
# host's global symbol scope, and C++ exceptions must keep resolving _Unwind_* to
# libgcc_s, not to libunwind's compatibility copies.
# libcurl and libcrypto are not linked into the library: the uploader dlopens
# them when S3 is configured (uploader/upload_libs.h), so a process started
# under the preload does not pay for libcurl's ~30 dependencies. The unit
# tests link them (their S3 stand-in client uses libcurl directly).
# libiberty (Rust demangling, preload/stacks/demangle.cc) is a static archive: its
# symbols are kept out of the library's exports so a host that has its own
# copy (gdb, binutils) keeps calling that one.
# libdw and libelf are not linked either: sampler/symbols/elfutils_lazy.cc
# dlopens libdw.so.1 at the first symbolization, so a process that never
# names a pc (most short-lived ones) does not map them and their libz,
# libbz2 and liblzma.
# mimalloc (the recorder's private heap) is not linked: a DT_NEEDED would put
# its operator new/delete and malloc family into the host's global scope, and
# Debian ships no static archive. preload/heap/recorder_heap.cc dlopens
# libmimalloc.so.2 with RTLD_LOCAL instead (libmimalloc-dev stays in the
# packages for mimalloc.h and that library).
# zstd is linked from Debian's static archive (PIC): one library fewer for
# the loader to map and relocate in every process (LD_DEBUG=statistics on
# /bin/true: 519 -> 401 relocations, 855k -> 661k loader cycles, medians of
# 5), and private to us (--exclude-libs: its symbols stay local in every
# shared object linked with LIBS, sanitizer builds too). libunwind's
# archive is not PIC, so it stays shared.
LIBS     := -Wl,--no-as-needed -lgcc_s -Wl,--as-needed -lunwind-x86_64 -lunwind \
            -Wl,-Bstatic -lzstd -Wl,-Bdynamic -Wl,--exclude-libs,libzstd.a -liberty -Wl,--exclude-libs,libiberty.a -ldl -lrt -pthread
UNIT_LIBS := $(LIBS) -ldw -lelf -lcurl -lcrypto

DEBIAN_PACKAGES := g++ make pkg-config libunwind-dev libdw-dev libelf-dev libzstd-dev zlib1g-dev \
  libcurl4-openssl-dev libssl-dev libmimalloc-dev libiberty-dev doctest-dev python3 python3-zstandard \
  python3-botocore python3-crcmod python3-pytest zstd clang libclang-rt-14-dev golang-go procps \
  redis-server redis-tools nginx wrk heaptrack google-perftools libgoogle-perftools4 linux-perf \
  python3-matplotlib time rustc chromium protobuf-compiler libpython3.11-testsuite \
  clickhouse-server clickhouse-client python3-clickhouse-driver \
  postgresql python3-psycopg2 python3-redis nodejs clang-format valgrind

LIB_SRCS   := $(sort $(shell find format sampler uploader preload -name '*.cc'))
HOOK_SRCS  := $(filter $(foreach d,$(sort $(dir $(LIB_SRCS))),$(d)hook_%.cc),$(LIB_SRCS)) \
              preload/runtime/lifecycle.cc
CORE_SRCS  := $(filter-out $(HOOK_SRCS),$(LIB_SRCS))
LIB_OBJS   := $(LIB_SRCS:%.cc=$(BUILD)/obj/%.o)
CORE_OBJS  := $(CORE_SRCS:%.cc=$(BUILD)/obj/%.o)
UNIT_SRCS  := $(wildcard tests/unit/*.cc)
UNIT_HDRS  := $(wildcard tests/unit/*.h)
PROG_C     := $(wildcard tests/programs/*.c)
PROG_CC    := $(wildcard tests/programs/*.cc)
PROG_HDRS  := $(wildcard tests/programs/*.h)
PLUGIN_CC  := $(wildcard tests/programs/plugins/*.cc)
PROGRAMS   := $(PROG_C:tests/programs/%.c=$(BUILD)/programs/%) \
              $(PROG_CC:tests/programs/%.cc=$(BUILD)/programs/%) \
              $(PLUGIN_CC:tests/programs/plugins/%.cc=$(BUILD)/programs/lib%.so)
DEMO       := $(BUILD)/programs/demo_service
PRELOAD_C  := $(wildcard tests/preloads/*.c)
TEST_PRELOADS := $(PRELOAD_C:tests/preloads/%.c=$(BUILD)/preloads/%.so)

.PHONY: all deps demo test test-fast check-layering check-format unit integration check-sanitizers check-preload-asan check-preload-tsan fuzz bench install clean
all: $(BUILD)/libflightrec.so $(BUILD)/unit_tests $(PROGRAMS) $(TEST_PRELOADS)

deps:
	@missing=""; for p in $(DEBIAN_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q $$missing; \
	else echo "make deps: all packages present"; fi

$(BUILD)/obj/%.o: %.cc
	@mkdir -p $(dir $@)
	$(CXX) $(LIB_CXXFLAGS) -MMD -MP -c $< -o $@

# The preload itself: libstdc++ linked in and hidden, only the C hooks
# exported (preload/exports.map says why); unreferenced sections dropped.
# Shipped without its debug info, which every process under the preload
# would otherwise carry in the file it maps (about 22 of its 23 MB): that
# goes to libflightrec.so.debug beside it (found through the debuglink by
# libdw and gdb, so our own frames keep their files and lines) and to
# $(BUILD)/.build-id/xx/yyyy.debug, which `make install` puts under
# /usr/lib/debug/.build-id/. The symbol table stays in the library.
$(BUILD)/libflightrec.so: $(LIB_OBJS) preload/exports.map
	$(CXX) -shared -o $@.full $(LIB_OBJS) -Wl,-z,nodelete -Wl,-z,now -Wl,--gc-sections -Wl,--build-id \
	  -static-libstdc++ $(LIBS) -Wl,--exclude-libs,ALL -Wl,--version-script=preload/exports.map
	objcopy --only-keep-debug --compress-debug-sections=none $@.full $@.debug
	objcopy --strip-debug --add-gnu-debuglink=$@.debug $@.full $@.tmp
	@id=$$(readelf -n $@.tmp | sed -n 's/.*Build ID: //p'); \
	  dir=$(BUILD)/.build-id/$$(echo $$id | cut -c1-2); rm -rf $(BUILD)/.build-id; mkdir -p $$dir; \
	  ln -f $@.debug $$dir/$$(echo $$id | cut -c3-).debug
	rm -f $@.full
	mv -f $@.tmp $@

$(BUILD)/libflightrec_core.a: $(CORE_OBJS)
	@rm -f $@
	ar rcs $@ $(CORE_OBJS)

$(BUILD)/unit_tests: $(UNIT_SRCS) $(UNIT_HDRS) $(BUILD)/libflightrec_core.a
	$(CXX) $(CXXFLAGS_BASE) -o $@ $(UNIT_SRCS) $(BUILD)/libflightrec_core.a $(UNIT_LIBS)

# Test programs are built like ordinary distribution binaries: optimised, no frame pointers.
PROG_FLAGS := -O2 -g -fomit-frame-pointer -pthread -Wall -Wextra -Werror
$(BUILD)/programs/%: tests/programs/%.c $(PROG_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(PROG_FLAGS) -o $@ $< -ldl -lm
# Linked with libunwind.so.8 itself (what it tests: tests/programs/unwind_linked.c).
$(BUILD)/programs/unwind_linked: tests/programs/unwind_linked.c
	@mkdir -p $(dir $@)
	$(CC) $(PROG_FLAGS) -o $@ $< -lunwind
$(BUILD)/programs/%: tests/programs/%.cc $(PROG_HDRS)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++20 $(PROG_FLAGS) -o $@ $< -ldl -lm
$(BUILD)/programs/lib%.so: tests/programs/plugins/%.cc $(PROG_HDRS)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++20 $(PROG_FLAGS) -shared -fPIC -o $@ $< -ldl

# Test-only shims loaded ahead of the preload (tests/preloads/*.c say what each does).
$(BUILD)/preloads/%.so: tests/preloads/%.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -fPIC -shared -Wall -Wextra -Werror -o $@ $< -ldl

demo: deps all
	@$(PYTHON) scripts/flightrec-demo $(BUILD)

unit: $(BUILD)/unit_tests
	$(BUILD)/unit_tests

# The speedscope viewer (npm package `speedscope`) that test_report_speedscope.py
# loads exported files into, in headless Chromium: project-local, not committed.
SPEEDSCOPE_VIEWER := $(BUILD)/npm/node_modules/speedscope/dist/release/index.html
$(SPEEDSCOPE_VIEWER):
	@command -v npm >/dev/null || { SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q npm; }
	npm install --prefix $(BUILD)/npm --no-audit --no-fund --loglevel=error speedscope@1.25.0

# --durations: the 25 slowest tests of each run, so slow ones get noticed
# (and marked @pytest.mark.slow: tests/integration/pytest.ini).
PYTEST_DURATIONS := --durations=25
integration: all $(SPEEDSCOPE_VIEWER)
	cd tests/integration && FLIGHTREC_BUILD=$(abspath $(BUILD)) $(PYTHON) -m pytest -q -x -p no:cacheprovider \
	  $(PYTEST_DURATIONS) .

# The quick loop while working: unit tests, then the integration tests not
# marked slow, against the production build; no sanitizers, no deps check.
# make test stays the full suite that CI runs.
# The dependency rule of docs/ARCHITECTURE.md (its include exceptions are the allow-list).
check-layering:
	$(PYTHON) tests/layering/check_includes.py
	$(PYTHON) tests/layering/check_reader_imports.py --self-test
	$(PYTHON) tests/layering/check_reader_imports.py
	$(PYTHON) tests/layering/check_named_paths.py --self-test
	$(PYTHON) tests/layering/check_named_paths.py
	$(MAKE) --no-print-directory check-format

# The C++ tree stays as .clang-format says (issue 40): one style, checked, so a
# change never mixes a fix with a reformat. tests/programs opt out (fixtures
# whose line numbers tests assert on).
CLANG_FORMAT ?= $(shell command -v clang-format-14 || command -v clang-format)
check-format:
	@test -n "$(CLANG_FORMAT)" || { echo "check-format: clang-format not found (make deps installs it)"; exit 1; }
	@{ git ls-files '*.cc' '*.h' 2>/dev/null || find . -name '*.cc' -o -name '*.h' | sed 's|^\./||'; } \
	  | grep -v -e '^tests/programs/' -e '^build/' | xargs -r $(CLANG_FORMAT) --dry-run -Werror
	@echo "check-format: the C++ tree is formatted"

test-fast: all $(SPEEDSCOPE_VIEWER) check-layering
	$(BUILD)/unit_tests
	cd tests/integration && FLIGHTREC_BUILD=$(abspath $(BUILD)) $(PYTHON) -m pytest -q -x -p no:cacheprovider \
	  $(PYTEST_DURATIONS) -m "not slow" .

test: deps all
	$(MAKE) check-layering
	$(MAKE) unit
	$(MAKE) -j2 check-sanitizers
	$(MAKE) integration

# ---- sanitizers -----------------------------------------------------------------
# The unit tests under ASan+UBSan and under TSan (the concurrency suite), and
# the preload itself built with ASan+UBSan and with TSan running real
# programs: the integration tests in SAN_INTEGRATION with libasan loaded ahead
# of it, and those in TSAN_INTEGRATION with libtsan ahead of it.
# Objects are built per file (make -j2 helps); they live under build/asan and
# build/tsan. Under ASan the allocator is ASan's, so our malloc hooks never
# run there: the allocation tests stay out of SAN_INTEGRATION.
ASAN_FLAGS := -O1 -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
TSAN_FLAGS := -O1 -fsanitize=thread
ASAN_LIB_OBJS  := $(LIB_SRCS:%.cc=$(BUILD)/asan/obj/%.o)
ASAN_UNIT_OBJS := $(CORE_SRCS:%.cc=$(BUILD)/asan/obj/%.o) $(UNIT_SRCS:%.cc=$(BUILD)/asan/obj/%.o)
TSAN_UNIT_OBJS := $(CORE_SRCS:%.cc=$(BUILD)/tsan/obj/%.o) $(UNIT_SRCS:%.cc=$(BUILD)/tsan/obj/%.o)
TSAN_LIB_OBJS  := $(LIB_SRCS:%.cc=$(BUILD)/tsan/obj/%.o)
# Left out: the allocation tests (see above); test_transparency.py (every
# process of a make -j2 or bash tree pays ASan's start-up: minutes on 2 cores);
# test_s3_upload.py (under ASan alone, exit hangs in p11-kit's destructor on
# glibc's setlocale lock once libcurl has run; not seen without ASan); the
# forked-child sample count (ASan slows the child's sampler thread until its
# perf ring overflows under load, so a short child may show only lost samples);
# raw_exit, the timing promise the TSan run leaves out too (below): an
# ASan-slowed flush thread at nice +10 on a loaded machine wrote no block in
# the 0.8 s run once (clean-clone CI beside a perf-profiled redis); the plain
# integration run keeps checking it. And the forked worker: its parent forks
# 4 ms after start, while our threads are still starting, and GCC 12's ASan
# takes no allocator locks around fork (libasan.so.8 has no fork interceptor
# or atfork handler): a parent thread inside ASan's calloc at the fork leaves
# the child's new flush thread waiting on that lock for good (seen in CI; gdb:
# AsanThread::Init -> pthread_getattr_np -> calloc -> Mutex::Lock). glibc's
# malloc locks its arenas around fork; the plain run checks the worker. The
# same lock, under load, also stops cpu_fork's child
# (test_a_forked_childs_samples_are_unwound_whole): "flush thread did not
# finish before the exit deadline", no child segment, in 1-2 of 8 runs beside
# two busy loops with either sampler layout; the plain run checks it.
SAN_TESTS := test_runtime.py test_crash.py test_privacy.py test_sampler_programs.py \
  test_sockets_echo.py test_sockets_misc.py test_sockets_direct.py test_term_signals.py
SAN_INTEGRATION := $(SAN_TESTS) -k "not forked_child_is_profiled and not raw_exit and not forked_worker \
  and not forked_childs_samples"
# The TSan preload (check-preload-tsan) runs SAN_TESTS minus: every SIGPROF-
# mode run (the sampler installs its SIGPROF handler with libc's sigaction,
# behind TSan's interceptor, so TSan does not know when it runs: it can
# interrupt TSan's own bookkeeping, seen as a SIGSEGV in offcpu_mix and a
# false ring race); the fork tests (a forked child of a multithreaded process
# starts our threads again and TSan aborts on "dup thread with used id", or
# hangs: relative_output's Python fork once ran past 120 s; forked_mid_request's
# child, forked while the parent's flush thread was in TSan's malloc, waited
# for good on that allocator lock, inherited held (gdb: both of its threads
# in SizeClassAllocator64 Mutex::Lock): GCC 12's TSan takes no allocator lock
# around fork);
# raw_exit, a timing promise (blocks written every 250 ms) that a TSan-slowed
# flush thread at nice +10 does not keep on a loaded machine (0 samples in 4
# of 5 runs beside two busy loops, with this stop's library and the last
# one's alike; the plain integration run keeps checking it);
# 500 threads x 50 starts (over the 120 s timeout under TSan); the SIGTERM
# seal's 1 s promise (a TSan-slowed flush thread on a loaded machine left the
# segment .active once; the plain run keeps checking it). The crash tests
# whose own SIGSEGV handler calls _exit run here again: _exit now only asks
# the flush thread and waits (issue 38), nothing allocates in the handler.
TSAN_INTEGRATION := $(SAN_TESTS) -k "not (sigprof and not perf) and not forked_child \
  and not fork_without_exec and not forked_worker and not 500_threads \
  and not raw_exit and not relative_output and not sigterm_seals and not forked_mid_request"
# Exit status 86 and a report on stderr for any ASan/UBSan finding; crash
# signals are left to the program (and to flightrec's crash capture).
SAN_ASAN_OPTIONS := detect_leaks=0:handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0:handle_abort=0:allow_user_segv_handler=1:exitcode=86:verify_asan_link_order=0
SAN_UBSAN_OPTIONS := print_stacktrace=1:halt_on_error=1:exitcode=86
# Exit status 66 for any TSan report. Crash signals as for ASan (TSan's own
# handlers would also call our sigaction hook before TSan has set itself up).
# report_signal_unsafe stays on: our handlers must stay async-signal-safe.
# die_after_fork=0: a forked child that only execs or exits is fine.
# Suppressions: tests/sanitizers/tsan.supp, each entry with its reason.
SAN_TSAN_OPTIONS := halt_on_error=1:exitcode=66:handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0:handle_abort=0:die_after_fork=0:suppressions=$(abspath tests/sanitizers/tsan.supp)

$(BUILD)/asan/obj/%.o: %.cc
	@mkdir -p $(dir $@)
	$(CXX) $(LIB_CXXFLAGS) $(ASAN_FLAGS) -MMD -MP -c $< -o $@
$(BUILD)/tsan/obj/%.o: %.cc
	@mkdir -p $(dir $@)
	$(CXX) $(LIB_CXXFLAGS) $(TSAN_FLAGS) -MMD -MP -c $< -o $@
$(BUILD)/asan/libflightrec.so: $(ASAN_LIB_OBJS)
	$(CXX) -shared -fsanitize=address,undefined -o $@ $(ASAN_LIB_OBJS) -Wl,-z,nodelete -Wl,-z,now $(LIBS)
$(BUILD)/tsan/libflightrec.so: $(TSAN_LIB_OBJS)
	$(CXX) -shared -fsanitize=thread -o $@ $(TSAN_LIB_OBJS) -Wl,-z,nodelete -Wl,-z,now $(LIBS)
$(BUILD)/unit_tests_asan: $(ASAN_UNIT_OBJS)
	$(CXX) -fsanitize=address,undefined -o $@ $(ASAN_UNIT_OBJS) $(UNIT_LIBS)
$(BUILD)/unit_tests_tsan: $(TSAN_UNIT_OBJS)
	$(CXX) -fsanitize=thread -o $@ $(TSAN_UNIT_OBJS) $(UNIT_LIBS)

check-sanitizers: $(BUILD)/unit_tests_asan $(BUILD)/unit_tests_tsan $(BUILD)/asan/libflightrec.so \
  $(BUILD)/tsan/libflightrec.so all
	ASAN_OPTIONS=detect_leaks=0 $(BUILD)/unit_tests_asan
	TSAN_OPTIONS=halt_on_error=1 $(BUILD)/unit_tests_tsan --test-suite=concurrency
	$(MAKE) check-preload-asan
	$(MAKE) check-preload-tsan

check-preload-asan: $(BUILD)/asan/libflightrec.so all
	cd tests/integration && FLIGHTREC_BUILD=$(abspath $(BUILD)) \
	  FLIGHTREC_LIB=$(abspath $(BUILD))/asan/libflightrec.so \
	  FLIGHTREC_PRELOAD_FIRST=$$($(CXX) -print-file-name=libasan.so) \
	  ASAN_OPTIONS=$(SAN_ASAN_OPTIONS) UBSAN_OPTIONS=$(SAN_UBSAN_OPTIONS) \
	  $(PYTHON) -m pytest -q -x -p no:cacheprovider $(PYTEST_DURATIONS) $(SAN_INTEGRATION)

check-preload-tsan: $(BUILD)/tsan/libflightrec.so all
	cd tests/integration && FLIGHTREC_BUILD=$(abspath $(BUILD)) \
	  FLIGHTREC_LIB=$(abspath $(BUILD))/tsan/libflightrec.so \
	  FLIGHTREC_PRELOAD_FIRST=$$($(CXX) -print-file-name=libtsan.so) \
	  TSAN_OPTIONS=$(SAN_TSAN_OPTIONS) \
	  $(PYTHON) -m pytest -q -x -p no:cacheprovider $(PYTEST_DURATIONS) $(TSAN_INTEGRATION)

# ---- fuzzing: libFuzzer on the C++ segment reader, then the corruption fuzzer on
# flightrec-dump (tests/fuzz/dump_corruption.py: real segments recorded by the test
# programs, mutated, every subcommand run on each mutant; it prints its random seed,
# replay with --seed S --only N). Each runs FUZZ_SECONDS (short by default).
FUZZ_SECONDS ?= 20
# flightrec-dump fuzzing also fails a command that takes longer than this on a
# mutant, or whose peak RSS passes 400 MiB (dump_corruption.RSS_BUDGET_MB).
FUZZ_MAX_SECONDS ?= 8
$(BUILD)/fuzz_reader: tests/fuzz/fuzz_reader.cc $(wildcard format/*.cc format/*.h)
	@mkdir -p $(dir $@)
	clang++ -std=c++20 -O1 -g -I. -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
	  -o $@ tests/fuzz/fuzz_reader.cc $(wildcard format/*.cc) -lzstd -lmimalloc
fuzz: $(BUILD)/fuzz_reader $(BUILD)/libflightrec.so $(PROGRAMS)
	@mkdir -p $(BUILD)/fuzz-corpus
	$(BUILD)/fuzz_reader -max_total_time=$(FUZZ_SECONDS) -max_len=65536 $(BUILD)/fuzz-corpus tests/fuzz/seeds
	$(PYTHON) tests/fuzz/dump_corruption.py --build $(BUILD) --seconds $(FUZZ_SECONDS) --max-seconds $(FUZZ_MAX_SECONDS)

bench: all
	$(MAKE) -C bench BUILD=$(abspath $(BUILD)) CORE_LIBS="$(LIBS)"

install: $(BUILD)/libflightrec.so
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BUILD)/libflightrec.so $(DESTDIR)$(PREFIX)/lib/libflightrec.so
	@# Where gdb, libdw and flightrec's own symbolizer look for it by build-id.
	@dbg=$$(cd $(BUILD)/.build-id && ls */*.debug); \
	  install -D -m 0644 $(BUILD)/.build-id/$$dbg $(DESTDIR)/usr/lib/debug/.build-id/$$dbg; \
	  echo "installed debug info: /usr/lib/debug/.build-id/$$dbg"
	install -m 0755 scripts/flightrec-dump $(DESTDIR)$(PREFIX)/bin/flightrec-dump
	install -d $(DESTDIR)$(PREFIX)/share/flightrec/flightrec_lib
	install -m 0644 scripts/flightrec_lib/*.py $(DESTDIR)$(PREFIX)/share/flightrec/flightrec_lib/
	install -d $(DESTDIR)$(PREFIX)/share/flightrec/flightrec_lib/commands
	install -m 0644 scripts/flightrec_lib/commands/*.py $(DESTDIR)$(PREFIX)/share/flightrec/flightrec_lib/commands/

clean:
	rm -rf $(BUILD)

-include $(LIB_OBJS:.o=.d) $(ASAN_LIB_OBJS:.o=.d) $(ASAN_UNIT_OBJS:.o=.d) $(TSAN_LIB_OBJS:.o=.d) $(TSAN_UNIT_OBJS:.o=.d)
