# flightrec — every build, test and benchmark target.
#
#   make            build build/libflightrec.so and the test programs
#   make deps       install the Debian packages the build, tests and tools need
#   make demo       run the bundled demo service under the preload and dump its trace
#   make test       deps + build + unit tests + sanitizer unit tests + integration tests
#   make bench      benchmarks (never part of make test)
#   make install    PREFIX=/usr/local, honours DESTDIR
#
# Sources are found by directory so a new file needs no Makefile edit:
#   format/*.cc sampler/*.cc uploader/*.cc preload/*.cc  -> libflightrec.so
#   the same minus the interposers (preload/hook_*.cc, preload/lifecycle.cc)
#                                                         -> build/libflightrec_core.a (unit tests)
#   tests/unit/*.cc                                       -> build/unit_tests (doctest)
#   tests/programs/*.c|*.cc                               -> build/programs/NAME
#   tests/integration/test_*.py                           -> pytest

PREFIX   ?= /usr/local
DESTDIR  ?=
BUILD    ?= build
CXX      ?= g++
CC       ?= gcc
PYTHON   := /usr/bin/python3

WARN     := -Wall -Wextra -Werror
CXXFLAGS_BASE := -std=c++20 -O2 -g $(WARN) -fPIC -pthread -I. -D_GNU_SOURCE
LIB_CXXFLAGS  := $(CXXFLAGS_BASE) -fvisibility=hidden
# libgcc_s is named before libunwind on purpose: the preload's dependencies join the
# host's global symbol scope, and C++ exceptions must keep resolving _Unwind_* to
# libgcc_s, not to libunwind's compatibility copies.
LIBS     := -Wl,--no-as-needed -lgcc_s -Wl,--as-needed -lunwind-x86_64 -lunwind -ldw -lelf \
            -lzstd -lcurl -lcrypto -lmimalloc -ldl -lrt -pthread

DEBIAN_PACKAGES := g++ make pkg-config libunwind-dev libdw-dev libelf-dev libzstd-dev \
  libcurl4-openssl-dev libssl-dev libmimalloc-dev doctest-dev python3 python3-zstandard \
  python3-botocore python3-pytest zstd clang libclang-rt-14-dev golang-go procps \
  redis-server redis-tools nginx wrk heaptrack google-perftools libgoogle-perftools4 linux-perf \
  python3-matplotlib time

LIB_SRCS   := $(wildcard format/*.cc sampler/*.cc uploader/*.cc preload/*.cc)
HOOK_SRCS  := $(wildcard preload/hook_*.cc) preload/lifecycle.cc
CORE_SRCS  := $(filter-out $(HOOK_SRCS),$(LIB_SRCS))
LIB_OBJS   := $(LIB_SRCS:%.cc=$(BUILD)/obj/%.o)
CORE_OBJS  := $(CORE_SRCS:%.cc=$(BUILD)/obj/%.o)
UNIT_SRCS  := $(wildcard tests/unit/*.cc)
PROG_C     := $(wildcard tests/programs/*.c)
PROG_CC    := $(wildcard tests/programs/*.cc)
PROGRAMS   := $(PROG_C:tests/programs/%.c=$(BUILD)/programs/%) \
              $(PROG_CC:tests/programs/%.cc=$(BUILD)/programs/%)
DEMO       := $(BUILD)/programs/demo_service

.PHONY: all deps demo test unit integration check-sanitizers fuzz bench install clean
all: $(BUILD)/libflightrec.so $(BUILD)/unit_tests $(PROGRAMS)

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

$(BUILD)/libflightrec.so: $(LIB_OBJS)
	$(CXX) -shared -o $@ $(LIB_OBJS) -Wl,-z,nodelete -Wl,-z,now $(LIBS)

$(BUILD)/libflightrec_core.a: $(CORE_OBJS)
	@rm -f $@
	ar rcs $@ $(CORE_OBJS)

$(BUILD)/unit_tests: $(UNIT_SRCS) $(BUILD)/libflightrec_core.a
	$(CXX) $(CXXFLAGS_BASE) -o $@ $(UNIT_SRCS) $(BUILD)/libflightrec_core.a $(LIBS)

# Test programs are built like ordinary distribution binaries: optimised, no frame pointers.
PROG_FLAGS := -O2 -g -fomit-frame-pointer -pthread -Wall -Wextra -Werror
$(BUILD)/programs/%: tests/programs/%.c
	@mkdir -p $(dir $@)
	$(CC) $(PROG_FLAGS) -o $@ $< -ldl -lm
$(BUILD)/programs/%: tests/programs/%.cc
	@mkdir -p $(dir $@)
	$(CXX) -std=c++20 $(PROG_FLAGS) -o $@ $< -ldl -lm

demo: deps all
	@$(PYTHON) scripts/flightrec-demo $(BUILD)

unit: $(BUILD)/unit_tests
	$(BUILD)/unit_tests

integration: all
	cd tests/integration && FLIGHTREC_BUILD=$(abspath $(BUILD)) $(PYTHON) -m pytest -q -x -p no:cacheprovider .

test: deps all
	$(MAKE) unit
	$(MAKE) check-sanitizers
	$(MAKE) integration

# ---- sanitizers: the unit tests under ASan+UBSan and TSan --------------------------
SAN_SRCS := $(CORE_SRCS) $(UNIT_SRCS)
$(BUILD)/unit_tests_asan: $(SAN_SRCS) $(wildcard */*.h)
	$(CXX) $(CXXFLAGS_BASE) -O1 -fsanitize=address,undefined -fno-sanitize-recover=all \
	  -fno-omit-frame-pointer -o $@ $(SAN_SRCS) $(LIBS)
$(BUILD)/unit_tests_tsan: $(SAN_SRCS) $(wildcard */*.h)
	$(CXX) $(CXXFLAGS_BASE) -O1 -fsanitize=thread -o $@ $(SAN_SRCS) $(LIBS)
check-sanitizers: $(BUILD)/unit_tests_asan $(BUILD)/unit_tests_tsan
	ASAN_OPTIONS=detect_leaks=0 $(BUILD)/unit_tests_asan
	TSAN_OPTIONS=halt_on_error=1 $(BUILD)/unit_tests_tsan --test-suite=concurrency

# ---- fuzzing: libFuzzer on the C++ segment reader, then the corruption fuzzer on
# flightrec-dump (tests/fuzz/dump_corruption.py: real segments recorded by the test
# programs, mutated, every subcommand run on each mutant; it prints its random seed,
# replay with --seed S --only N). Each runs FUZZ_SECONDS (short by default).
FUZZ_SECONDS ?= 20
$(BUILD)/fuzz_reader: tests/fuzz/fuzz_reader.cc $(wildcard format/*.cc format/*.h)
	@mkdir -p $(dir $@)
	clang++ -std=c++20 -O1 -g -I. -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
	  -o $@ tests/fuzz/fuzz_reader.cc $(wildcard format/*.cc) -lzstd -lmimalloc
fuzz: $(BUILD)/fuzz_reader $(BUILD)/libflightrec.so $(PROGRAMS)
	@mkdir -p $(BUILD)/fuzz-corpus
	$(BUILD)/fuzz_reader -max_total_time=$(FUZZ_SECONDS) -max_len=65536 $(BUILD)/fuzz-corpus tests/fuzz/seeds
	$(PYTHON) tests/fuzz/dump_corruption.py --build $(BUILD) --seconds $(FUZZ_SECONDS)

bench: all
	$(MAKE) -C bench BUILD=$(abspath $(BUILD))

install: $(BUILD)/libflightrec.so
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BUILD)/libflightrec.so $(DESTDIR)$(PREFIX)/lib/libflightrec.so
	install -m 0755 scripts/flightrec-dump $(DESTDIR)$(PREFIX)/bin/flightrec-dump
	install -d $(DESTDIR)$(PREFIX)/share/flightrec/flightrec_lib
	install -m 0644 scripts/flightrec_lib/*.py $(DESTDIR)$(PREFIX)/share/flightrec/flightrec_lib/

clean:
	rm -rf $(BUILD)

-include $(LIB_OBJS:.o=.d)
