"""What symbolization leaves behind in the program (issue #44).

With the debug-file cache (sampler/symbols/debug_file_cache.h), libdw maps
an inflated copy of such a file, kept once per build-id, instead of
inflating its sections into each process's memory; the tests at the end
check the copy, its reuse, its repair and a refused directory.

test_read_pages_of_symbol_files_are_given_back: what libdw read of the
files it keeps mapped (libc's, its debug file's inflated copy) does not stay
resident in the program (sampler/symbols/source_pages.h).

dwarf_idle loads a library whose debug sections are compressed (libdw
decompresses them into memory it allocates: half a megabyte here, megabytes
for a -dbgsym package), burns CPU in it, idles, burns CPU in other code of
it, idles again. The recorder must
  * let go of the library's debug information once it has been idle (libdw's
    private mapping of the file leaves the program's maps), twice: after a
    reload too;
  * still name the second phase's new pcs with their file and line (the
    reload works);
  * leave glibc's malloc as it found it: the decompressed sections are
    freed on the recorder's thread, and freeing a glibc mmapped chunk would
    raise glibc's process-wide mmap threshold, so the program's own
    256 KiB malloc would no longer be mmapped.
"""
import os
import re
import stat
import struct
import subprocess
import sys

import pytest

from test_sampler_programs import BURN_LIB_SRC

FILLERS = 3000  # enough DWARF for a decompressed .debug_info of ~0.5 MB


def burner(tag, entry):
    """test_sampler_programs' CPU burner without its clock: TAG_inner called from ENTRY."""
    return BURN_LIB_SRC[BURN_LIB_SRC.index("__attribute__"):].replace("TAG", tag).replace("ENTRY", entry)


# Two burners, one per phase (-O1: never folded into one function).
LIB_HEAD = BURN_LIB_SRC.replace("TAG", "one").replace("ENTRY", "phase_one") + burner("two", "phase_two")

FILLER = ("struct filler_{i} {{ int a; long b; double c; const char* d; unsigned short e[3]; }};\n"
          "int filler_fn_{i}(int a, long b, const char* d) {{ struct filler_{i} v = {{a, b, 1.5, d, {{1, 2, 3}}}}; "
          "return v.a + (int)v.b + (v.d ? v.d[0] : 0) + v.e[1]; }}\n")


def build_library(tmp_path, extra=""):
    src = tmp_path / "idle_lib.c"
    src.write_text(LIB_HEAD + "".join(FILLER.format(i=i) for i in range(FILLERS)) + extra)
    lib = tmp_path / "libidle.so"
    subprocess.run(["gcc", "-O1", "-g", "-fPIC", "-shared", "-Wl,--compress-debug-sections=zlib", "-o", str(lib),
                    str(src)], check=True)
    return lib, src


@pytest.mark.slow
def test_idle_debug_information_is_let_go_and_glibc_is_left_alone(fr, trace_dir, tmp_path):
    lib, src = build_library(tmp_path)
    # The cache off: libdw inflates the sections into memory, as where no
    # copy can be kept (tmpfs, a refused directory, a full disk).
    proc = fr.run([fr.program("dwarf_idle"), str(lib)], trace_dir,
                  env={"FLIGHTREC_CPU_HZ": 1000, "FLIGHTREC_DEBUG_CACHE": "off"}, timeout=300)
    lines = proc.stdout.split("\n")
    assert "dropped yes" in lines, proc.stdout
    assert "dropped again yes" in lines, proc.stdout
    assert "mmapped yes" in lines, proc.stdout
    assert "done" in lines
    samples = fr.events(trace_dir, "cpu.sample")
    for fn in ("one_inner", "two_inner"):
        leaves = [e["stack"][0] for e in samples if e["stack"] and e["stack"][0]["function"] == fn]
        assert len(leaves) >= 50, fn
        assert all(f["file"] == str(src) and f["line"] > 0 for f in leaves), fn


SHF_COMPRESSED = 0x800


def sections(path):
    """{name: (flags, offset, size)} of a 64-bit little-endian ELF file."""
    data = open(path, "rb").read()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3a)
    raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = raw[shstrndx]
    names = data[strtab[4]:strtab[4] + strtab[5]]
    out = {}
    for name_off, _type, flags, _addr, offset, size, *_ in raw:
        out[names[name_off:names.index(b"\0", name_off)].decode()] = (flags, offset, size)
    return out


def build_id(path):
    text = subprocess.run(["readelf", "-n", str(path)], capture_output=True, text=True, check=True).stdout
    return next(line.split()[-1] for line in text.splitlines() if "Build ID" in line)


def run_with_cache(fr, out, lib, cache, copy, expect_copy=True):
    os.makedirs(out, exist_ok=True)
    proc = fr.run([fr.program("dwarf_idle"), str(lib), str(copy if expect_copy else lib)], out,
                  env={"FLIGHTREC_CPU_HZ": 1000, "FLIGHTREC_DEBUG_CACHE": str(cache)}, timeout=300)
    lines = proc.stdout.split("\n")
    # libdw mapped the file named (the copy, or the library itself), let it go
    # when idle, and took it up again for the second phase.
    assert "dropped yes" in lines and "dropped again yes" in lines, proc.stdout + proc.stderr
    return proc


def assert_named_with_lines(fr, out, src):
    samples = fr.events(out, "cpu.sample")
    for fn in ("one_inner", "two_inner"):
        leaves = [e["stack"][0] for e in samples if e["stack"] and e["stack"][0]["function"] == fn]
        assert len(leaves) >= 50, fn
        assert all(f["file"] == str(src) and f["line"] > 0 for f in leaves), fn


@pytest.mark.slow
def test_compressed_debug_sections_are_mapped_from_one_inflated_copy(fr, tmp_path):
    lib, src = build_library(tmp_path)
    cache = tmp_path / "debug-cache"
    copy = cache / (build_id(lib) + ".debug")
    run_with_cache(fr, tmp_path / "first", lib, cache, copy)
    assert_named_with_lines(fr, tmp_path / "first", src)

    # The copy: ours, private, every section the library's, none compressed,
    # the debug sections byte for byte what binutils inflates.
    st = os.stat(copy)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid()
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    ours, theirs = sections(copy), sections(lib)
    assert set(ours) == set(theirs)
    assert not [n for n, (flags, _, _) in ours.items() if flags & SHF_COMPRESSED]
    compressed = [n for n, (flags, _, _) in theirs.items() if flags & SHF_COMPRESSED]
    assert ".debug_info" in compressed and ".debug_line" in compressed
    reference = tmp_path / "reference.so"
    subprocess.run(["objcopy", "--decompress-debug-sections", str(lib), str(reference)], check=True)
    for name in compressed + [".text", ".debug_str"]:
        a, b = tmp_path / "a.bin", tmp_path / "b.bin"
        subprocess.run(["objcopy", "--dump-section", f"{name}={a}", str(reference), "/dev/null"], check=True)
        subprocess.run(["objcopy", "--dump-section", f"{name}={b}", str(copy), "/dev/null"], check=True)
        assert a.read_bytes() == b.read_bytes(), name
    assert build_id(copy) == build_id(lib)
    assert not [p for p in os.listdir(cache) if ".tmp" in p]

    # A second process maps the same copy; nothing is written again.
    run_with_cache(fr, tmp_path / "second", lib, cache, copy)
    again = os.stat(copy)
    assert (again.st_ino, again.st_mtime_ns) == (st.st_ino, st.st_mtime_ns)
    assert_named_with_lines(fr, tmp_path / "second", src)

    # A copy cut short (a full disk, a hand) is not used: a whole one replaces it.
    with open(copy, "r+b") as f:
        f.truncate(st.st_size // 2)
    run_with_cache(fr, tmp_path / "third", lib, cache, copy)
    assert os.stat(copy).st_size == st.st_size
    assert sections(copy) == ours
    assert_named_with_lines(fr, tmp_path / "third", src)


@pytest.mark.slow
def test_a_refused_debug_cache_directory_leaves_names_to_memory(fr, tmp_path):
    lib, src = build_library(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cache = tmp_path / "debug-cache"
    cache.symlink_to(elsewhere)  # never followed
    proc = run_with_cache(fr, tmp_path / "out", lib, cache, None, expect_copy=False)
    warnings = [line for line in proc.stderr.splitlines() if "debug-file cache off" in line]
    assert len(warnings) == 1, proc.stderr
    assert os.listdir(elsewhere) == []
    assert_named_with_lines(fr, tmp_path / "out", src)


@pytest.mark.parametrize("damage", ["stream", "size"])
def test_a_corrupt_compressed_section_leaves_no_copy_and_the_program_runs(fr, tmp_path, damage):
    lib, _ = build_library(tmp_path, extra="void plugin_burn(double s) { phase_one(s); }\n")
    copy_name = build_id(lib) + ".debug"
    data = bytearray(lib.read_bytes())
    if damage == "stream":  # found while inflating: the copy is given up half-written
        _, offset, size = sections(lib)[".debug_info"]
        data[offset + size // 2:offset + size // 2 + 64] = b"\xff" * 64  # past the zlib header
    else:  # an inflated size no debug file has: refused from the headers
        _, offset, _ = sections(lib)[".debug_line"]
        struct.pack_into("<Q", data, offset + 8, 1 << 40)
    lib.write_bytes(bytes(data))
    cache = tmp_path / "debug-cache"
    out = tmp_path / "out"
    out.mkdir()
    proc = fr.run([fr.program("cpu_dlopen"), str(lib), "0.5"], out,
                  env={"FLIGHTREC_CPU_HZ": 1000, "FLIGHTREC_DEBUG_CACHE": str(cache)}, timeout=120)
    assert "plugin done" in proc.stdout
    # Neither a copy nor a temporary file of this library (a system library's
    # -dbgsym file may have been copied beside).
    assert not [p for p in os.listdir(cache) if p.startswith(copy_name)]
    # The symbol table still names the function (libdw cannot read the DWARF).
    samples = fr.events(out, "cpu.sample")
    assert any(e["stack"] and e["stack"][0]["function"] == "one_inner" for e in samples)


@pytest.mark.slow
def test_the_least_recently_read_copies_make_room_under_the_cap(fr, tmp_path):
    lib, src = build_library(tmp_path)
    cache = tmp_path / "debug-cache"
    cache.mkdir(mode=0o700)
    old = cache / ("00" * 20 + ".debug")  # a copy nobody has read for a day
    old.write_bytes(b"\0" * (2 << 20))
    os.utime(old, (1_700_000_000, 1_700_000_000))
    copy = cache / (build_id(lib) + ".debug")
    out = tmp_path / "out"
    out.mkdir()
    # 3 MiB: the old copy and this library's (1.4 MB) do not both fit.
    proc = fr.run([fr.program("dwarf_idle"), str(lib), str(copy)], out,
                  env={"FLIGHTREC_CPU_HZ": 1000, "FLIGHTREC_DEBUG_CACHE": str(cache),
                       "FLIGHTREC_DEBUG_CACHE_MAX_BYTES": 3 << 20}, timeout=300)
    assert "dropped yes" in proc.stdout.split("\n"), proc.stdout + proc.stderr  # libdw mapped the copy
    assert not old.exists()
    assert_named_with_lines(fr, out, src)


@pytest.mark.slow
def test_one_writer_per_copy_and_a_killed_writers_file_is_cleared(fr, tmp_path):
    lib, src = build_library(tmp_path)
    cache = tmp_path / "debug-cache"
    cache.mkdir(mode=0o700)
    copy = cache / (build_id(lib) + ".debug")
    writing = cache / (copy.name + ".tmp")
    writing.write_bytes(b"\0" * 4096)  # another process writing the copy now
    run_with_cache(fr, tmp_path / "first", lib, cache, None, expect_copy=False)  # libdw maps the library
    assert not copy.exists() and writing.read_bytes() == b"\0" * 4096  # its file left alone
    assert_named_with_lines(fr, tmp_path / "first", src)
    os.utime(writing, (1_700_000_000, 1_700_000_000))  # ... and its writer was killed long ago
    run_with_cache(fr, tmp_path / "second", lib, cache, copy)
    assert copy.exists() and not writing.exists()
    assert_named_with_lines(fr, tmp_path / "second", src)


def symbol_file_rss(pid):
    """{path: KiB resident} of the file mappings libelf makes for libdw:
    whole files, private and writable (rw-p at offset 0)."""
    out, cur = {}, None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            m = re.match(r"^[0-9a-f]+-[0-9a-f]+ (\S+) ([0-9a-f]+) \S+ \S+\s*(.*)$", line)
            if m:
                cur = (m.group(1), int(m.group(2), 16), m.group(3))
            elif line.startswith("Rss:") and cur and cur[0] == "rw-p" and cur[1] == 0 and cur[2].startswith("/"):
                out[cur[2]] = out.get(cur[2], 0) + int(line.split()[1])
    return out


def test_read_pages_of_symbol_files_are_given_back(fr, tmp_path):
    # A Python program burns CPU (its samples are named from libc's and
    # python's files), then sleeps: the files stay mapped for libdw, and
    # what it read of them must go (they were 500+ KiB resident before).
    script = ("import time\nt = time.time()\nwhile time.time() - t < 1.5: sum(range(1000))\n"
              "print('burnt', flush=True)\ntime.sleep(300)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], env=fr.env(tmp_path, {"FLIGHTREC_CPU_HZ": 500}),
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "burnt"
        fr.wait_until(lambda: symbol_file_rss(proc.pid), "libdw mapping a file to name a sample", timeout=120)
        # Every 5 s after libdw resolved a pc; the program no longer makes new ones.
        fr.wait_until(lambda: sum(symbol_file_rss(proc.pid).values()) <= 16,
                      "the pages of the symbol files given back", timeout=120)
        assert any("libc.so" in p or p.endswith(".debug") for p in symbol_file_rss(proc.pid))
    finally:
        proc.kill()
        proc.wait()
    # The samples are named as ever.
    samples = fr.events(tmp_path, "cpu.sample")
    assert samples
    assert any(f["function"] for e in samples for f in e["stack"])
