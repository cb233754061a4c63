// Debug-file cache (see debug_file_cache.h).
#include "sampler/symbols/debug_file_cache.h"

#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "sampler/symbols/build_id_path.h"
#include "format/fsize_guard.h"
#include "format/mi_containers.h"
#include "preload/flush/safe_path.h"
#include "preload/fds/fd_guard.h"
#include "preload/runtime/log.h"
#include "preload/runtime/seccomp_state.h"

namespace flightrec::sampler::debugcache {
namespace {

constexpr size_t kBufferBytes = 64 << 10;
constexpr uint64_t kMaxSectionBytes = 1ull << 32;    // an inflated section past this is not a debug file we know
constexpr uint64_t kDiskMarginBytes = 256ull << 20;  // left free on the disk after a copy
constexpr time_t kStaleTempSeconds = 600;            // a temporary copy this old was left by a killed writer
constexpr int kMaxSections = 4096;

// Plain data, no destructor: the exiting thread runs static destructors
// while the flush thread may still symbolize.
enum class Mode { kOff, kDefault, kExplicit };
Mode g_mode = Mode::kOff;
char g_dir[4096];  // kExplicit's directory
// The inodes of the copies handed to libdw so far (the first ones: a
// process names code from a few dozen files at most), for
// IsCopyHandedOut. Flush thread only.
constexpr size_t kMaxCopyInodes = 64;
uint64_t g_copy_inodes[kMaxCopyInodes];
size_t g_copies_handed_out = 0;
// The effective uid a directory was refused for: a process that drops root
// tries again, as its new user, in that user's own default directory.
uid_t g_refused_for = static_cast<uid_t>(-1);
uint64_t g_max_bytes = 1ull << 30;
std::atomic<bool> g_no_new_copies{false};  // exit mode: copies found are used, none is made
bool g_warned = false;
Stats g_stats;

template <typename T>
using Vec = format::MiVector<T>;

// One section of the copy: where its bytes come from and where they go.
struct Placed {
  int index;
  uint64_t from;      // offset in the source (after the Chdr for an inflated one)
  uint64_t from_len;  // bytes read from the source
  bool inflate;
};

// What the copy of a file will be, from its headers alone.
struct Plan {
  Elf64_Ehdr ehdr;
  Vec<Elf64_Shdr> shdrs;  // the copy's section headers
  Vec<Placed> moved;      // sections at or past `keep`, in the copy's order
  uint64_t keep = 0;      // bytes copied as they are from the front
  uint64_t size = 0;      // the copy's size
  unsigned char build_id[64];
  int build_id_len = 0;
};

bool ReadAll(int fd, void* buf, size_t n, uint64_t off) {
  auto* p = static_cast<char*>(buf);
  while (n) {
    const ssize_t r = pread(fd, p, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
    off += static_cast<uint64_t>(r);
  }
  return true;
}

bool WriteAll(int fd, const void* buf, size_t n) {
  auto* p = static_cast<const char*>(buf);
  while (n) {
    const ssize_t w = format::WriteWithoutSigxfsz(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool WriteZeros(int fd, uint64_t n) {
  static const char kZeros[4096] = {};
  while (n) {
    const size_t chunk = n < sizeof(kZeros) ? static_cast<size_t>(n) : sizeof(kZeros);
    if (!WriteAll(fd, kZeros, chunk)) return false;
    n -= chunk;
  }
  return true;
}

uint64_t AlignUp(uint64_t v, uint64_t align) { return align > 1 ? (v + align - 1) / align * align : v; }
bool PowerOfTwo(uint64_t v) { return v && !(v & (v - 1)); }

// The GNU build-id from the file's SHT_NOTE sections.
void FindBuildId(int fd, uint64_t file_size, Plan* plan) {
  for (const Elf64_Shdr& s : plan->shdrs) {
    if (s.sh_type != SHT_NOTE || s.sh_size < 16 || s.sh_size > 4096 || s.sh_offset > file_size - s.sh_size) continue;
    unsigned char note[4096];
    if (!ReadAll(fd, note, s.sh_size, s.sh_offset)) return;
    for (uint64_t at = 0; at + 12 <= s.sh_size;) {
      Elf64_Nhdr n;
      memcpy(&n, note + at, sizeof(n));
      const uint64_t name_at = at + 12, desc_at = name_at + AlignUp(n.n_namesz, 4);
      const uint64_t next = desc_at + AlignUp(n.n_descsz, 4);
      if (next > s.sh_size) break;
      if (n.n_type == NT_GNU_BUILD_ID && n.n_namesz == 4 && memcmp(note + name_at, "GNU", 4) == 0 && n.n_descsz >= 2 &&
          n.n_descsz <= sizeof(plan->build_id)) {
        memcpy(plan->build_id, note + desc_at, n.n_descsz);
        plan->build_id_len = static_cast<int>(n.n_descsz);
        return;
      }
      at = next;
    }
  }
}

// Reads the headers and plans the copy. False: not a 64-bit little-endian
// ELF file with zlib-compressed sections and a build-id that this layout can
// serve (the file is then handed over as it is).
bool PlanCopy(int fd, uint64_t file_size, Plan* plan) {
  Elf64_Ehdr& eh = plan->ehdr;
  if (file_size < sizeof(eh) || !ReadAll(fd, &eh, sizeof(eh), 0)) return false;
  if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_ident[EI_DATA] != ELFDATA2LSB || eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0 ||
      eh.e_shnum > kMaxSections || eh.e_shstrndx >= eh.e_shnum || eh.e_shoff > file_size ||
      uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr) > file_size - eh.e_shoff)
    return false;
  plan->shdrs.resize(eh.e_shnum);
  if (!ReadAll(fd, plan->shdrs.data(), eh.e_shnum * sizeof(Elf64_Shdr), eh.e_shoff)) return false;
  // The first compressed section: everything before it stays in place.
  uint64_t keep = UINT64_MAX;
  for (const Elf64_Shdr& s : plan->shdrs)
    if ((s.sh_flags & SHF_COMPRESSED) && s.sh_type != SHT_NOBITS) keep = std::min<uint64_t>(keep, s.sh_offset);
  if (keep == UINT64_MAX) return false;  // the common case: nothing to inflate
  if (keep > file_size || eh.e_phoff > keep || uint64_t{eh.e_phnum} * eh.e_phentsize > keep - eh.e_phoff) return false;
  if (eh.e_phnum && eh.e_phentsize != sizeof(Elf64_Phdr)) return false;
  for (int i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    if (!ReadAll(fd, &ph, sizeof(ph), eh.e_phoff + uint64_t{sizeof(ph)} * i)) return false;
    if (ph.p_filesz && (ph.p_offset > keep || ph.p_filesz > keep - ph.p_offset)) return false;
  }
  FindBuildId(fd, file_size, plan);
  if (plan->build_id_len == 0) return false;  // no name to keep the copy under
  for (int i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr& s = plan->shdrs[i];
    const bool data = s.sh_type != SHT_NOBITS && s.sh_size > 0;
    if (data && (s.sh_offset > file_size || s.sh_size > file_size - s.sh_offset)) return false;
    if (!data || s.sh_offset + s.sh_size <= keep) continue;
    if (s.sh_offset < keep) return false;     // straddles the first compressed one
    if (s.sh_addralign > 4096) return false;  // no debug section asks this; padding it would be waste
    Placed p{i, s.sh_offset, s.sh_size, false};
    if (s.sh_flags & SHF_COMPRESSED) {
      Elf64_Chdr ch;
      if (s.sh_size < sizeof(ch) || !ReadAll(fd, &ch, sizeof(ch), s.sh_offset)) return false;
      if (ch.ch_type != ELFCOMPRESS_ZLIB || ch.ch_size > kMaxSectionBytes || !PowerOfTwo(ch.ch_addralign) ||
          ch.ch_addralign > 4096)
        return false;  // zstd (ELFCOMPRESS_ZSTD) and others stay libdw's
      p = Placed{i, s.sh_offset + sizeof(ch), s.sh_size - sizeof(ch), true};
      s.sh_flags &= ~static_cast<uint64_t>(SHF_COMPRESSED);
      s.sh_size = ch.ch_size;
      s.sh_addralign = ch.ch_addralign;
    }
    plan->moved.push_back(p);
  }
  std::sort(plan->moved.begin(), plan->moved.end(), [](const Placed& a, const Placed& b) { return a.from < b.from; });
  uint64_t at = keep;
  for (const Placed& p : plan->moved) {
    Elf64_Shdr& s = plan->shdrs[p.index];
    at = AlignUp(at, s.sh_addralign);
    s.sh_offset = at;
    at += s.sh_size;
  }
  for (Elf64_Shdr& s : plan->shdrs)
    if ((s.sh_type == SHT_NOBITS || s.sh_size == 0) && s.sh_offset > keep) s.sh_offset = keep;
  at = AlignUp(at, 8);
  plan->ehdr.e_shoff = at;
  plan->keep = keep;
  plan->size = at + uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr);
  return true;
}

// zlib, from libz.so.1: libdw's own dependency, loaded with it (never
// linked: a process that never symbolizes does not map it).
struct Zlib {
  decltype(&inflateInit_) init = nullptr;
  decltype(&inflate) run = nullptr;
  decltype(&inflateEnd) end = nullptr;
};

const Zlib* LoadZlib() {
  static Zlib z;
  static bool tried = false;
  if (!tried) {
    tried = true;
    if (void* h = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL)) {
      z.init = reinterpret_cast<decltype(z.init)>(dlsym(h, "inflateInit_"));
      z.run = reinterpret_cast<decltype(z.run)>(dlsym(h, "inflate"));
      z.end = reinterpret_cast<decltype(z.end)>(dlsym(h, "inflateEnd"));
    }
  }
  return z.init && z.run && z.end ? &z : nullptr;
}

// Streams one compressed section's payload into out; exactly `size` bytes.
bool InflateSection(const Zlib& zl, int in, const Placed& p, uint64_t size, int out, unsigned char* ibuf,
                    unsigned char* obuf) {
  z_stream z;
  memset(&z, 0, sizeof(z));
  if (zl.init(&z, ZLIB_VERSION, static_cast<int>(sizeof(z))) != Z_OK) return false;
  uint64_t read = 0, written = 0;
  int rc = Z_OK;
  bool ok = true;
  while (ok && rc != Z_STREAM_END) {
    if (z.avail_in == 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kBufferBytes, p.from_len - read));
      if (n == 0 || !ReadAll(in, ibuf, n, p.from + read)) {
        ok = false;
        break;
      }
      read += n;
      z.next_in = ibuf;
      z.avail_in = static_cast<uInt>(n);
    }
    z.next_out = obuf;
    z.avail_out = kBufferBytes;
    rc = zl.run(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) ok = false;
    const size_t got = kBufferBytes - z.avail_out;
    if (ok && (written + got > size || !WriteAll(out, obuf, got))) ok = false;
    written += got;
  }
  zl.end(&z);
  return ok && written == size;
}

// Writes the copy into `out` (positioned at 0).
bool WriteCopy(int in, const Plan& plan, int out) {
  const Zlib* zl = LoadZlib();
  if (!zl) return false;
  Vec<unsigned char> bufs(2 * kBufferBytes);
  unsigned char* ibuf = bufs.data();
  unsigned char* obuf = ibuf + kBufferBytes;
  uint64_t at = 0;
  while (at < plan.keep) {  // the front, as it is, with the new e_shoff patched in below
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kBufferBytes, plan.keep - at));
    if (!ReadAll(in, ibuf, n, at) || !WriteAll(out, ibuf, n)) return false;
    at += n;
  }
  for (const Placed& p : plan.moved) {
    const Elf64_Shdr& s = plan.shdrs[p.index];
    if (!WriteZeros(out, s.sh_offset - at)) return false;
    if (p.inflate) {
      if (!InflateSection(*zl, in, p, s.sh_size, out, ibuf, obuf)) return false;
    } else {
      for (uint64_t done = 0; done < s.sh_size;) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(kBufferBytes, s.sh_size - done));
        if (!ReadAll(in, ibuf, n, p.from + done) || !WriteAll(out, ibuf, n)) return false;
        done += n;
      }
    }
    at = s.sh_offset + s.sh_size;
  }
  if (!WriteZeros(out, plan.ehdr.e_shoff - at)) return false;
  if (!WriteAll(out, plan.shdrs.data(), plan.shdrs.size() * sizeof(Elf64_Shdr))) return false;
  if (format::PwriteWithoutSigxfsz(out, &plan.ehdr, sizeof(plan.ehdr), 0) != static_cast<ssize_t>(sizeof(plan.ehdr)))
    return false;
  return fdatasync(out) == 0;
}

// The directory, opened (made on first use). -1 if off or refused.
int OpenDirectory() {
  if (g_mode == Mode::kOff || g_refused_for == geteuid()) return -1;
  const std::string dir = g_mode == Mode::kExplicit ? std::string(g_dir) : DefaultDirectory();
  std::string error;
  const int fd = OpenDirectoryPathSafely(dir, /*create=*/true, /*allow_foreign=*/false, &error);
  struct statfs fs;
  if (fd >= 0 && fstatfs(fd, &fs) == 0 && (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC)) {
    CloseTransientFd(fd);
    g_refused_for = geteuid();
    Log(LogLevel::kInfo, "debug-file cache off: %s is on tmpfs, where a copy would take memory", dir.c_str());
    return -1;
  }
  if (fd < 0) {
    g_refused_for = geteuid();  // a refused path stays refused for this user
    // The default quietly (a user without /var/tmp); a directory asked for, loudly.
    LogOnce(&g_warned, g_mode == Mode::kExplicit ? LogLevel::kWarn : LogLevel::kInfo,
            "debug-file cache off: %s; compressed debug information is inflated in memory "
            "(FLIGHTREC_DEBUG_CACHE)",
            error.c_str());
  }
  return fd;
}

// Makes room for `need` more bytes under the cap: drops stale temporary
// files, then copies of ours, least recently read first (atime: relatime
// still moves it once a day), a copy a process maps stays readable through
// its mapping. False if the room cannot be made.
bool MakeRoom(int dir_fd, uint64_t need) {
  const int fd = OpenTransientFdAt(dir_fd, ".", O_RDONLY | O_DIRECTORY);
  DIR* d = fd >= 0 ? fdopendir(fd) : nullptr;
  if (!d) {
    if (fd >= 0) CloseTransientFd(fd);
    return false;
  }
  struct Held {
    time_t atime;
    uint64_t bytes;
    char name[160];
  };
  Vec<Held> copies;
  uint64_t total = 0;
  const time_t now = time(nullptr);
  while (dirent* e = readdir(d)) {
    struct stat st;
    if (e->d_name[0] == '.' || fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
      continue;
    const bool ours = st.st_uid == geteuid();
    if (ours && strstr(e->d_name, ".tmp") && now - st.st_mtime > kStaleTempSeconds) {
      unlinkat(dirfd(d), e->d_name, 0);  // left by a killed writer
      continue;
    }
    const uint64_t bytes = static_cast<uint64_t>(st.st_blocks) * 512;
    total += bytes;
    if (ours && strlen(e->d_name) < sizeof(Held::name) && strstr(e->d_name, ".debug") && !strstr(e->d_name, ".tmp")) {
      Held h{st.st_atime, bytes, {}};
      memcpy(h.name, e->d_name, strlen(e->d_name) + 1);
      copies.push_back(h);
    }
  }
  std::sort(copies.begin(), copies.end(), [](const Held& a, const Held& b) { return a.atime < b.atime; });
  for (size_t i = 0; i < copies.size() && total + need > g_max_bytes; ++i)
    if (unlinkat(dirfd(d), copies[i].name, 0) == 0) total -= std::min(total, copies[i].bytes);
  CloseTransientDir(d);
  return total + need <= g_max_bytes;
}

// The copy `name` if it is whole and ours, opened read-only; else -1.
int OpenCopy(int dir_fd, const char* name, uint64_t size) {
  const int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() && static_cast<uint64_t>(st.st_size) == size)
    return fd;
  close(fd);
  return -1;
}

// Makes the copy `name` in dir_fd; true if it is now in place.
bool MakeCopy(int in, const Plan& plan, int dir_fd, const char* name) {
  struct statvfs vfs;
  if (fstatvfs(dir_fd, &vfs) != 0 || static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize < plan.size + kDiskMarginBytes)
    return false;
  // Under `ulimit -f` a write past the limit would signal (fsize_guard.h).
  if (plan.size > g_max_bytes || !format::FileSizeAllows(plan.size) || !MakeRoom(dir_fd, plan.size)) return false;
  // One writer per copy: the temporary name is the copy's own, taken with
  // O_EXCL. The 64 backends of a server started on an empty cache would
  // otherwise each write the same 10 MB; the others inflate in memory this
  // once, as without a cache. A killed writer's file is deleted by MakeRoom
  // once it is kStaleTempSeconds old.
  char tmp[256];
  snprintf(tmp, sizeof(tmp), "%s.tmp", name);
  const int out = OpenTransientFdAt(dir_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (out < 0) return false;
  const bool ok = WriteCopy(in, plan, out);
  CloseTransientFd(out);
  if (ok && renameat(dir_fd, tmp, dir_fd, name) == 0) return true;
  unlinkat(dir_fd, tmp, 0);
  return false;
}

}  // namespace

void Configure(const std::string& setting, uint64_t max_bytes) {
  g_max_bytes = max_bytes;
  g_refused_for = static_cast<uid_t>(-1);
  g_mode = Mode::kOff;
  if (setting.empty()) {
    g_mode = Mode::kDefault;
  } else if (setting != "off" && setting.size() < sizeof(g_dir)) {
    memcpy(g_dir, setting.c_str(), setting.size() + 1);
    g_mode = Mode::kExplicit;
  }
}

std::string DefaultDirectory() { return "/var/tmp/flightrec-debug-" + std::to_string(geteuid()); }

int Substitute(int fd) {
  // Under a seccomp filter the copy's calls (mkdirat, renameat, fstatvfs,
  // fdatasync...) may be ones the program never makes and the filter kills on.
  if (g_mode == Mode::kOff || fd < 0 || SeccompFiltered()) return fd;
  const int saved_errno = errno;
  struct stat st;
  Plan plan;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || !PlanCopy(fd, static_cast<uint64_t>(st.st_size), &plan)) {
    errno = saved_errno;
    return fd;
  }
  char name[2 * sizeof(plan.build_id) + 8];
  BuildIdHex(plan.build_id, static_cast<size_t>(plan.build_id_len), name, sizeof(name));
  memcpy(name + 2 * plan.build_id_len, ".debug", 7);
  int copy = -1;
  if (const int dir_fd = OpenDirectory(); dir_fd >= 0) {
    copy = OpenCopy(dir_fd, name, plan.size);
    if (copy >= 0) {
      ++g_stats.used;
    } else if (!g_no_new_copies.load(std::memory_order_relaxed) && MakeCopy(fd, plan, dir_fd, name)) {
      copy = OpenCopy(dir_fd, name, plan.size);
      if (copy >= 0) ++g_stats.written;
    }
    CloseTransientFd(dir_fd);
  }
  errno = saved_errno;
  if (copy < 0) {
    ++g_stats.refused;
    return fd;
  }
  close(fd);
  struct stat copy_st;
  if (fstat(copy, &copy_st) == 0 && g_copies_handed_out < kMaxCopyInodes)
    g_copy_inodes[g_copies_handed_out++] = static_cast<uint64_t>(copy_st.st_ino);
  errno = saved_errno;
  return copy;
}

bool IsCopyHandedOut(uint64_t inode) {
  for (size_t i = 0; i < g_copies_handed_out; i++)
    if (g_copy_inodes[i] == inode) return true;
  return false;
}

void StopMakingCopies() { g_no_new_copies.store(true, std::memory_order_relaxed); }

Stats GetStats() { return g_stats; }

}  // namespace flightrec::sampler::debugcache
