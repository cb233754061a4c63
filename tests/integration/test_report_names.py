"""names.py: the short function names reports show by default (as pprof
shortens C++ names), checked on the names libdw's demangler really produces
for the demo service and the test programs, and end to end: `top`, `tree`
and `heap` on a recorded demo_service trace, with and without --full-names."""
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))

from flightrec_lib.names import simplify  # noqa: E402

CASES = [
    ("std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >::"
     "_M_create(unsigned long&, unsigned long)", "std::string::_M_create"),
    ("std::_Rb_tree<int, std::pair<int const, std::__cxx11::basic_string<char, std::char_traits<char>, "
     "std::allocator<char> > >, std::_Select1st<std::pair<int const, std::__cxx11::basic_string<char, "
     "std::char_traits<char>, std::allocator<char> > > >, std::less<int>, std::allocator<std::pair<int const, "
     "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > > > >::"
     "_S_right(std::_Rb_tree_node_base*)", "std::_Rb_tree::_S_right"),
    ("void std::vector<int, std::allocator<int> >::_M_realloc_insert<int const&>(__gnu_cxx::__normal_iterator"
     "<int*, std::vector<int, std::allocator<int> > >, int const&)", "std::vector::_M_realloc_insert"),
    ("(anonymous namespace)::count_primes(unsigned long)", "(anon)::count_primes"),
    ("{anonymous}::x()", "(anon)::x"),
    ("operator new(unsigned long)", "operator new"),
    ("operator delete[](void*, unsigned long)", "operator delete[]"),
    ("std::ostream::operator<<(int)", "std::ostream::operator<<"),
    ("bool operator< <int>(A<int> const&, A<int> const&)", "operator<"),
    ("Cache::operator()(int) const", "Cache::operator()"),
    ("Handle::operator bool() const", "Handle::operator bool"),
    ("std::vector<int, std::allocator<int> >::operator[](unsigned long)", "std::vector::operator[]"),
    ("std::unique_ptr<Foo, std::default_delete<Foo> >::operator->() const", "std::unique_ptr::operator->"),
    ("main::{lambda(int)#1}::operator()(int) const", "main::{lambda#1}::operator()"),
    ("Buffer::data() &&", "Buffer::data"),
    ("std::foo[abi:cxx11](int)", "std::foo"),
    ("burn(int) [clone .cold]", "burn"),
    ("<alloc::vec::Vec<T,A> as core::ops::drop::Drop>::drop", "<alloc::vec::Vec as core::ops::drop::Drop>::drop"),
    ("<<A as B>::C as D<x>>::e", "<<A as B>::C as D>::e"),
    ("core::ptr::drop_in_place<alloc::vec::Vec<u8>>", "core::ptr::drop_in_place"),
    ("rust_split::burn_a", "rust_split::burn_a"),
    ("main", "main"),
    ("", ""),
    # Not demangled C++: names from a JIT's perf map, stripped binaries, markers, Go.
    ("sub_401000 (stripped_split)", "sub_401000 (stripped_split)"),
    ("JS:*handleRequest /srv/app.js:12:3", "JS:*handleRequest /srv/app.js:12:3"),
    ("JS:*<anonymous> /srv/app.js:1:2", "JS:*<anonymous> /srv/app.js:1:2"),
    ("py::main:/srv/x.py", "py::main:/srv/x.py"),
    ("[truncated]", "[truncated]"),
    ("main.(*Server).serve", "main.(*Server).serve"),
    ("std::vector<int>::push_back(int&&) [clone .cold]", "std::vector::push_back"),
]


@pytest.mark.parametrize("full,short", CASES)
def test_simplify(full, short):
    assert simplify(full) == short


def test_unbalanced_names_come_back_whole_or_shortened_never_raise():
    for junk in ["foo<", "foo(", "a>b", "operator", "<", ">>>", "((((", "x::operator", "[clone"]:
        out = simplify(junk)
        assert isinstance(out, str) and out


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    from conftest import Flightrec
    fr = Flightrec()
    out = tmp_path_factory.mktemp("demo")
    fr.run([fr.program("demo_service")], out, env={"FLIGHTREC_SERVICE": "demo"})
    return fr, out


@pytest.mark.slow
def test_reports_show_short_names_and_full_names_on_request(demo):
    fr, out = demo
    top = fr.dump_run("top", "--limit", "50", out).stdout
    assert "(anon)::count_primes" in top and "(anon)::checksum_block" in top, top
    # No parameter lists or template arguments anywhere in the default report.
    functions = [line.split("  ")[-1] for line in top.splitlines()[2:]]
    for fn in functions:
        name = fn.split("  (")[0]
        assert "<" not in name.replace("operator<", "") and "(unsigned" not in name, fn
    full = fr.dump_run("top", "--limit", "50", "--full-names", out).stdout
    assert "(anonymous namespace)::count_primes(unsigned long)" in full, full
    doc = fr.dump_json("top", "--json", out)
    by_short = {f["function"]: f for f in doc["functions"]}
    assert by_short["(anon)::count_primes"]["function_full"] == "(anonymous namespace)::count_primes(unsigned long)"
    tree = fr.dump_run("tree", out).stdout
    assert re.search(r"[┬─] \(anon\)::worker_main$", tree, re.M), tree


def test_heap_site_is_the_programs_function(demo):
    fr, out = demo
    doc = fr.dump_json("heap", "--json", out)
    top = doc["sites"][0]
    # demo_service builds std::strings in build_index (line 49: index[i] = std::string(...)):
    # the site is that line, with the library's string construction as context.
    assert top["function"] == "(anon)::build_index", top
    assert top["function_full"] == "(anonymous namespace)::build_index(int)", top
    assert top["file"].endswith("demo_service.cc") and top["line"] in (49, 51), top
    assert any("_M_create" in v for v in top["via"]), top
    assert top["stack"][:2] == ["(anon)::build_index", "(anon)::worker_main"], top
    # The leak (line 51: new std::string, kept forever) is a site of its own, live at the end.
    leak = [s for s in doc["sites"] if s["function"] == "(anon)::build_index" and s["line"] == 51]
    assert leak and leak[0]["live_bytes_est"] > 0, doc["sites"][:4]
    text = fr.dump_run("heap", out).stdout.splitlines()
    assert "(anon)::build_index" in text[2] and "demo_service.cc:" in text[2] and " via " in text[2], text[:3]


@pytest.mark.slow
def test_make_demo_shows_short_names_and_the_programs_heap_site(tmp_path):
    """What `make demo` prints (scripts/flightrec-demo, run on a copy of the build's
    pieces so the shared build/demo-trace is left alone)."""
    import shutil
    import subprocess
    from conftest import BUILD, LIB, ROOT
    build = tmp_path / "build"
    (build / "programs").mkdir(parents=True)
    shutil.copy(LIB, build / "libflightrec.so")
    shutil.copy(os.path.join(BUILD, "programs", "demo_service"), build / "programs" / "demo_service")
    proc = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "scripts", "flightrec-demo"), str(build)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    sections = proc.stdout.split("\n== ")
    heap = next(s for s in sections if s.startswith("flightrec-dump heap"))
    first_site = heap.splitlines()[3]  # command, summary, column titles, then the biggest site
    # allocated (n unit), count, live (n unit), then the site's function.
    assert re.match(r"\s*\S+ \S+\s+\S+\s+\S+ \S+\s+\(anon\)::build_index ", first_site), heap
    assert "demo_service.cc:" in first_site and "via std::string::" in first_site, first_site
    top = next(s for s in sections if s.startswith("flightrec-dump top --kind cpu"))
    assert "(anon)::checksum_block" in top and "(unsigned long)" not in top, top
    assert "requests --diff" in proc.stdout
