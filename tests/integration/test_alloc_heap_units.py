"""heap_sites's pure pieces (cmd_heap and fleet_heap use them): which frames
are the allocator's, and where a sample's site is. (The whole report is
checked end to end, against programs with known totals, in
test_alloc_profile.py.)"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))

from flightrec_lib import heap_sites  # noqa: E402


def frame(function, mapping=None, file="", line=0):
    return {"function": function, "file": file, "line": line, "address": 0x1000,
            "mapping": {"path": mapping, "start": 0, "end": 0, "offset": 0, "build_id": ""} if mapping else None,
            "inlined": False}


def test_allocator_frames():
    for name in ["malloc", "operator new(unsigned long)", "operator new[](unsigned long)",
                 "std::__new_allocator<int>::allocate(unsigned long, void const*)",
                 "std::allocator_traits<std::allocator<int> >::allocate(std::allocator<int>&, unsigned long)",
                 "std::_Vector_base<int, std::allocator<int> >::_M_allocate(unsigned long)",
                 "__libc_malloc", "mi_malloc"]:
        assert heap_sites.is_allocator_frame(frame(name)), name
    assert heap_sites.is_allocator_frame(frame("", mapping="/opt/lib/libflightrec.so"))
    for name in ["main", "handle_request(Request&)", "std::vector<int, std::allocator<int> >::reserve(unsigned long)",
                 "allocate_buffers", "", "my_malloc_wrapper"]:
        assert not heap_sites.is_allocator_frame(frame(name)), name


def test_site_is_the_programs_first_frame_outside_allocator_and_library():
    frames = [frame("operator new(unsigned long)"),
              frame("std::__new_allocator<int>::allocate(unsigned long, void const*)"),
              frame("std::vector<int, std::allocator<int> >::reserve(unsigned long)"),
              frame("build_index()"), frame("main")]
    # vector::reserve is the library's plumbing: the site is the program's build_index,
    # with reserve as the context it went through.
    assert heap_sites.site_index(frames) == 3
    assert heap_sites.library_context(frames, 3) == ["std::vector::reserve"]
    # As `make demo` records it: std::string's constructor inlined into the program's
    # function (its file is a libstdc++ header), _M_create out of line, return types in front.
    demo = [frame("operator new(unsigned long)", mapping="/usr/lib/x86_64-linux-gnu/libstdc++.so.6"),
            frame("std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >"
                  "::_M_create(unsigned long&, unsigned long)", file="/usr/include/c++/12/bits/basic_string.tcc"),
            frame("void std::vector<int, std::allocator<int> >::_M_realloc_insert<int const&>"
                  "(__gnu_cxx::__normal_iterator<int*, std::vector<int, std::allocator<int> > >, int const&)"),
            frame("inlined_helper", file="/usr/include/c++/12/bits/basic_string.h"),
            frame("strdup", mapping="/usr/lib/x86_64-linux-gnu/libc.so.6"),
            frame("(anonymous namespace)::build_index(int)", file="/src/demo.cc", line=49),
            frame("main", file="/src/demo.cc")]
    assert heap_sites.site_index(demo) == 5
    assert heap_sites.library_context(demo, 5) == ["std::string::_M_create", "std::vector::_M_realloc_insert",
                                                  "inlined_helper", "strdup"]
    # A program whose own functions are templates over std types is still the program.
    assert not heap_sites.is_library_frame(frame("void mylib::fill<std::vector<int> >(std::vector<int>&)"))
    # No program frame at all (a static constructor inside libstdc++): the first non-allocator frame.
    assert heap_sites.site_index([frame("malloc"), frame("std::locale::_Impl::_Impl(unsigned long)"),
                                frame("std::ios_base::Init::Init()")]) == 1
    assert heap_sites.site_index([frame("load_config()"), frame("main")]) == 0
    # Nothing but allocator frames (no symbols for the caller): the leaf.
    assert heap_sites.site_index([frame("malloc"), frame("operator new(unsigned long)")]) == 0
    assert heap_sites.site_index([]) == 0
