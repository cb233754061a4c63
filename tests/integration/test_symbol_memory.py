"""What symbolization leaves behind in the program (issue #44).

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
import subprocess

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


def build_library(tmp_path):
    src = tmp_path / "idle_lib.c"
    src.write_text(LIB_HEAD + "".join(FILLER.format(i=i) for i in range(FILLERS)))
    lib = tmp_path / "libidle.so"
    subprocess.run(["gcc", "-O1", "-g", "-fPIC", "-shared", "-Wl,--compress-debug-sections=zlib", "-o", str(lib),
                    str(src)], check=True)
    return lib, src


@pytest.mark.slow
def test_idle_debug_information_is_let_go_and_glibc_is_left_alone(fr, trace_dir, tmp_path):
    lib, src = build_library(tmp_path)
    proc = fr.run([fr.program("dwarf_idle"), str(lib)], trace_dir, env={"FLIGHTREC_CPU_HZ": 1000}, timeout=300)
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
