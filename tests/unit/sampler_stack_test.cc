// Unit tests for preload/stacks/local_stack and preload/stacks/stack_unwinder: a chain of
// noinline functions (this file is built -O2, which omits frame pointers on
// x86_64) must come out whole, both unwound in place and from a stack copy.
#include <doctest/doctest.h>
#include <dlfcn.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <ucontext.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "preload/stacks/local_stack.h"
namespace stacks = flightrec::stacks;
#include "sampler/sample_events.h"
#include "preload/stacks/stack_unwinder.h"

namespace {

using flightrec::stacks::CaptureCurrentStack;
using flightrec::stacks::RegisterSet;

// The recorder prepares its address spaces in its constructor; tests do it here.
static int Unwind(const stacks::RegisterSet& regs, uint64_t stack_addr, const uint8_t* copy, size_t len, uint64_t* pcs,
                  int max) {
  flightrec::stacks::PrepareUnwinders();
  return flightrec::stacks::UnwindCopiedStack(flightrec::stacks::UnwindRole::kSampler, regs, stack_addr, copy, len, pcs,
                                              max);
}

// Return addresses recorded by each link of the chain: the caller's pc after
// the call, i.e. exactly what the unwinder must find (minus 1).
struct ChainTrace {
  uint64_t ret_into[4];  // [0] into chain_3 ... [3] into the test body
  uint64_t pcs[64];
  int n;
  // Stack-copy capture (second test).
  stacks::RegisterSet regs;
  uint64_t stack_addr;
  std::vector<uint8_t> copy;
};

volatile int g_sink;

enum class Mode { kLocal, kCopy };

// The live stack holds AddressSanitizer redzones in the sanitizer build:
// copy it byte by byte, uninstrumented (memcpy would be checked).
#if defined(__SANITIZE_ADDRESS__)
__attribute__((no_sanitize("address")))
#endif
void CopyLiveStack(uint8_t* out, uint64_t addr, size_t len) {
  const volatile uint8_t* src = reinterpret_cast<const volatile uint8_t*>(addr);
  for (size_t i = 0; i < len; ++i) out[i] = src[i];
}

bool StackBounds(uint64_t* lo, uint64_t* hi) {
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return false;
  void* addr = nullptr;
  size_t size = 0;
  pthread_attr_getstack(&attr, &addr, &size);
  pthread_attr_destroy(&attr);
  *lo = reinterpret_cast<uint64_t>(addr);
  *hi = *lo + size;
  return true;
}

__attribute__((noinline)) void chain_leaf(ChainTrace* t, Mode mode) {
  t->ret_into[0] = reinterpret_cast<uint64_t>(__builtin_return_address(0));
  if (mode == Mode::kLocal) {
    t->n = stacks::CaptureCurrentStack(t->pcs, 64, 0);
  } else {
    // Registers as of the instruction after getcontext's call, then a copy of
    // the live stack from that sp up to 16 KiB, bounded by the stack's end.
    ucontext_t uc;
    getcontext(&uc);
    flightrec::stacks::RegisterSetFromUcontext(&uc, &t->regs);
    uint64_t lo = 0, hi = 0;
    REQUIRE(StackBounds(&lo, &hi));
    const uint64_t sp = t->regs.sp();
    REQUIRE(sp >= lo);
    REQUIRE(sp < hi);
    size_t len = 16384;
    if (sp + len > hi) len = hi - sp;
    t->stack_addr = sp;
    t->copy.resize(len);
    CopyLiveStack(t->copy.data(), sp, len);
  }
  g_sink = g_sink + 1;  // no tail call
}
__attribute__((noinline)) void chain_3(ChainTrace* t, Mode mode) {
  t->ret_into[1] = reinterpret_cast<uint64_t>(__builtin_return_address(0));
  chain_leaf(t, mode);
  g_sink = g_sink + 1;
}
__attribute__((noinline)) void chain_2(ChainTrace* t, Mode mode) {
  t->ret_into[2] = reinterpret_cast<uint64_t>(__builtin_return_address(0));
  chain_3(t, mode);
  g_sink = g_sink + 1;
}
__attribute__((noinline)) void chain_1(ChainTrace* t, Mode mode) {
  t->ret_into[3] = reinterpret_cast<uint64_t>(__builtin_return_address(0));
  chain_2(t, mode);
  g_sink = g_sink + 1;
}

// Index of pc in pcs[0..n), or -1.
int Find(const uint64_t* pcs, int n, uint64_t pc) {
  for (int i = 0; i < n; ++i)
    if (pcs[i] == pc) return i;
  return -1;
}

void ExpectChain(const uint64_t* pcs, int n, const ChainTrace& t, int first_caller_index) {
  // ret_into[k] - 1 must appear in order, consecutively, starting at
  // first_caller_index: chain_3's frame, chain_2's, chain_1's, the test body's.
  for (int k = 0; k < 4; ++k) {
    INFO("link " << k);
    CHECK(Find(pcs, n, t.ret_into[k] - 1) == first_caller_index + k);
  }
}

}  // namespace

TEST_CASE("sampler_local_stack: chain through noinline frames comes out leaf first") {
  ChainTrace t{};
  chain_1(&t, Mode::kLocal);
  REQUIRE(t.n >= 6);
  // pcs[0] is inside chain_leaf (the call to CaptureCurrentStack); then the
  // return addresses into chain_3, chain_2, chain_1 and this test body.
  ExpectChain(t.pcs, t.n, t, 1);
}

TEST_CASE("sampler_local_stack: skip drops frames and max bounds the output") {
  ChainTrace t{};
  chain_1(&t, Mode::kLocal);
  REQUIRE(t.n >= 6);
  uint64_t few[3];
  // Called from here, skip=0 gives this function's frame first; compare with
  // a capture of depth limited to 3 from the same place, then skip 1.
  uint64_t a[8], b[8];
  const int na = stacks::CaptureCurrentStack(a, 8, 0);
  const int nb = stacks::CaptureCurrentStack(b, 8, 1);
  REQUIRE(na >= 3);
  REQUIRE(nb == na - 1 + (na == 8 ? 1 : 0));
  CHECK(b[0] == a[1]);
  CHECK(b[1] == a[2]);
  CHECK(stacks::CaptureCurrentStack(few, 3, 0) == 3);
  CHECK(stacks::CaptureCurrentStack(few, 0, 0) == 0);
  // Asked to, a capture cut short says so in its last slot; one that fits
  // (the whole stack, < 256 frames here) does not.
  uint64_t cut[3], whole[200];
  CHECK(stacks::CaptureCurrentStack(cut, 3, 0, stacks::MarkTruncated::kYes) == 3);
  CHECK(cut[2] == flightrec::stacks::kTruncatedStackPc);
  CHECK(cut[1] == few[1]);
  const int n = stacks::CaptureCurrentStack(whole, 200, 0, stacks::MarkTruncated::kYes);
  REQUIRE(n > 3);
  REQUIRE(n < 200);
  for (int i = 0; i < n; ++i) CHECK(whole[i] != flightrec::stacks::kTruncatedStackPc);
}

TEST_CASE("sampler_local_stack: libgcc's unwinder gives the frames libunwind's does") {
  namespace sm = flightrec::stacks;
  sm::InitLocalStackCapture();
  REQUIRE(sm::LibgccUnwinderAvailable());
  ChainTrace fast{}, lean{};
  sm::SetLocalUnwinderForThisThread(sm::LocalUnwinder::kLibunwind);
  chain_1(&fast, Mode::kLocal);
  sm::SetLocalUnwinderForThisThread(sm::LocalUnwinder::kLibgcc);
  chain_1(&lean, Mode::kLocal);
  sm::SetLocalUnwinderForThisThread(sm::LocalUnwinder::kByRate);
  REQUIRE(lean.n >= 6);
  ExpectChain(lean.pcs, lean.n, lean, 1);
  // The same call sites, frame for frame, down to libc's start (where the
  // two may disagree on the outermost frame); frame 4 is this body's own
  // two calls of chain_1.
  REQUIRE(fast.n >= 6);
  CHECK(std::abs(fast.n - lean.n) <= 1);
  const int common = std::min(fast.n, lean.n) - 1;
  for (int i = 0; i < common; ++i) {
    INFO("frame " << i);
    if (i != 4) CHECK(fast.pcs[i] == lean.pcs[i]);
  }
  CHECK(fast.pcs[4] == fast.ret_into[3] - 1);
  CHECK(lean.pcs[4] == lean.ret_into[3] - 1);
}

TEST_CASE("sampler_local_stack: a thread moves to libunwind's unwinder after 32 captures in a second") {
  namespace sm = flightrec::stacks;
  sm::InitLocalStackCapture();
  REQUIRE(sm::LibgccUnwinderAvailable());
  struct Result {
    bool before = true, at_32 = true, after = false;
  } r;
  // A new thread: this one may have switched already (earlier cases capture often).
  std::thread([&r] {
    uint64_t pcs[16];
    r.before = sm::LibunwindChosenForThisThread();
    for (int i = 0; i < 32; ++i) stacks::CaptureCurrentStack(pcs, 16, 0);
    r.at_32 = sm::LibunwindChosenForThisThread();
    stacks::CaptureCurrentStack(pcs, 16, 0);
    r.after = sm::LibunwindChosenForThisThread();
  }).join();
  CHECK_FALSE(r.before);
  CHECK_FALSE(r.at_32);
  CHECK(r.after);
}

TEST_CASE("sampler_unwinder: copied stack unwinds through -fomit-frame-pointer frames") {
  ChainTrace t{};
  chain_1(&t, Mode::kCopy);
  REQUIRE(!t.copy.empty());
  uint64_t pcs[64];
  const int n = Unwind(t.regs, t.stack_addr, t.copy.data(), t.copy.size(), pcs, 64);
  REQUIRE(n >= 6);
  // Frame 0 is the exact pc getcontext returned to, inside chain_leaf.
  CHECK(pcs[0] == t.regs.ip());
  ExpectChain(pcs, n, t, 1);

  // The copy, not live memory, is what is read: clobber the saved return
  // address into chain_2 in the copy (every slot holding that value: stale
  // copies may sit in dead slots below it) and the walk must stop there.
  const uint64_t ret = t.ret_into[1];
  int clobbered = 0;
  for (size_t off = 0; off + 8 <= t.copy.size(); off += 8) {
    uint64_t v;
    std::memcpy(&v, t.copy.data() + off, 8);
    if (v != ret) continue;
    const uint64_t zero = 0;
    std::memcpy(t.copy.data() + off, &zero, 8);
    ++clobbered;
  }
  REQUIRE(clobbered >= 1);
  uint64_t cut[64];
  const int m = Unwind(t.regs, t.stack_addr, t.copy.data(), t.copy.size(), cut, 64);
  CHECK(m == 2);  // chain_leaf, chain_3; chain_3's return address is now 0
  CHECK(Find(cut, m, t.ret_into[2] - 1) == -1);
}

TEST_CASE("sampler_unwinder: a leaf's function is asked about once, and again after a library loads") {
  ChainTrace t{};
  chain_1(&t, Mode::kCopy);
  REQUIRE(!t.copy.empty());
  uint64_t first[64], again[64];
  const int n = Unwind(t.regs, t.stack_addr, t.copy.data(), t.copy.size(), first, 64);
  REQUIRE(n >= 6);
  const uint64_t asked = stacks::LeafProcInfoLookups();
  const int m = Unwind(t.regs, t.stack_addr, t.copy.data(), t.copy.size(), again, 64);
  CHECK(stacks::LeafProcInfoLookups() == asked);  // chain_leaf's function is known now
  REQUIRE(m == n);
  CHECK(std::equal(first, first + n, again));

  // A library loaded since: what is known is forgotten (its code may lie
  // where an unloaded one's did), and the same walk comes out the same.
  char dir[] = "/tmp/fr-leaf-XXXXXX";
  REQUIRE(mkdtemp(dir));
  const std::string copy = std::string(dir) + "/libfr_leaf_test.so";
  void* z = dlopen("libz.so.1", RTLD_NOW | RTLD_NOLOAD);
  Dl_info info{};
  if (!z) z = dlopen("libz.so.1", RTLD_NOW);
  REQUIRE(z);
  REQUIRE(dladdr(dlsym(z, "zlibVersion"), &info));
  REQUIRE(system(("cp " + std::string(info.dli_fname) + " " + copy).c_str()) == 0);
  void* fresh = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
  REQUIRE(fresh);
  const int k = Unwind(t.regs, t.stack_addr, t.copy.data(), t.copy.size(), again, 64);
  CHECK(stacks::LeafProcInfoLookups() == asked + 1);
  REQUIRE(k == n);
  CHECK(std::equal(first, first + n, again));
  dlclose(fresh);
  unlink(copy.c_str());
  rmdir(dir);
}

TEST_CASE("sampler_unwinder: garbage registers and copies end the walk without faulting") {
  std::vector<uint8_t> junk(4096);
  for (size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<uint8_t>(i * 131 + 7);
  stacks::RegisterSet regs{};
  uint64_t pcs[32];
  // ip in no mapping, sp pointing at the junk copy.
  regs.r[stacks::RegisterSet::kRip] = 0x10;
  regs.r[stacks::RegisterSet::kRsp] = 0x7000'0000'0000;
  int n = Unwind(regs, regs.sp(), junk.data(), junk.size(), pcs, 32);
  CHECK(n >= 1);
  CHECK(pcs[0] == 0x10);
  // ip inside our code, sp unmapped and no copy: still terminates.
  regs.r[stacks::RegisterSet::kRip] = reinterpret_cast<uint64_t>(&chain_leaf) + 1;
  regs.r[stacks::RegisterSet::kRsp] = 0x8;
  n = Unwind(regs, 0, nullptr, 0, pcs, 32);
  CHECK(n >= 1);
  CHECK(n <= 32);
  regs.r[stacks::RegisterSet::kRip] = 0;
  CHECK(Unwind(regs, 0, nullptr, 0, pcs, 32) == 0);
}

TEST_CASE("sampler_unwinder: perf register layout maps onto libunwind numbering") {
  const uint64_t mask = flightrec::stacks::PerfRegsUserMask();
  // AX..IP (bits 0..8) and R8..R15 (bits 16..23): 17 registers.
  CHECK(__builtin_popcountll(mask) == 17);
  CHECK(mask == (((1ull << 9) - 1) | (0xffull << 16)));
  uint64_t values[17];
  for (int i = 0; i < 17; ++i) values[i] = 100 + i;  // ascending perf bit order
  stacks::RegisterSet rs;
  REQUIRE(flightrec::stacks::RegisterSetFromPerf(mask, values, 17, &rs));
  CHECK(rs.r[stacks::RegisterSet::kRax] == 100);  // PERF_REG_X86_AX = bit 0
  CHECK(rs.r[stacks::RegisterSet::kRbx] == 101);  // BX = bit 1
  CHECK(rs.r[stacks::RegisterSet::kRcx] == 102);
  CHECK(rs.r[stacks::RegisterSet::kRdx] == 103);
  CHECK(rs.r[stacks::RegisterSet::kRsp] == 107);  // SP = bit 7
  CHECK(rs.r[stacks::RegisterSet::kRip] == 108);  // IP = bit 8
  CHECK(rs.r[stacks::RegisterSet::kR8] == 109);   // R8 = bit 16, the 10th value
  CHECK(rs.r[stacks::RegisterSet::kR15] == 116);
  CHECK_FALSE(flightrec::stacks::RegisterSetFromPerf(mask, values, 16, &rs));
}

TEST_CASE("sampler_unwinder: stacks::SafeReadSelf reads mapped memory and refuses unmapped") {
  const uint64_t v = 0x1122334455667788ull;
  uint64_t out = 0;
  CHECK(flightrec::stacks::SafeReadSelf(reinterpret_cast<uint64_t>(&v), &out, 8));
  CHECK(out == v);
  CHECK_FALSE(flightrec::stacks::SafeReadSelf(0x8, &out, 8));
}

TEST_CASE("sampler_unwinder: works where a sandbox refuses process_vm_readv") {
  // A forked child (this process is single-threaded here) installs a seccomp
  // filter that fails process_vm_readv with EPERM, as container profiles may.
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
      _exit(10);
    uint64_t probe = 0;
    struct iovec l {
      &probe, 8
    }, r{&probe, 8};
    if (syscall(SYS_process_vm_readv, getpid(), &l, 1, &r, 1, 0) != -1 || errno != EPERM) _exit(11);
    const uint64_t v = 0x5566778899aabbccull;
    uint64_t out = 0;
    if (!flightrec::stacks::SafeReadSelf(reinterpret_cast<uint64_t>(&v), &out, 8) || out != v) _exit(12);
    if (flightrec::stacks::SafeReadSelf(0x8, &out, 8)) _exit(13);
    ChainTrace t{};
    chain_1(&t, Mode::kCopy);
    uint64_t pcs[64];
    const int n = Unwind(t.regs, t.stack_addr, t.copy.data(), t.copy.size(), pcs, 64);
    for (int k = 0; k < 4; ++k)
      if (Find(pcs, n, t.ret_into[k] - 1) != 1 + k) _exit(20 + k);
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
