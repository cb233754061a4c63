"""cmd_heap's pure pieces: which frames are the allocator's, and where a
sample's site is. (The whole report is checked end to end, against programs
with known totals, in test_alloc_profile.py.)"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))

from flightrec_lib import cmd_heap  # noqa: E402


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
        assert cmd_heap.is_allocator_frame(frame(name)), name
    assert cmd_heap.is_allocator_frame(frame("", mapping="/opt/lib/libflightrec.so"))
    for name in ["main", "handle_request(Request&)", "std::vector<int, std::allocator<int> >::reserve(unsigned long)",
                 "allocate_buffers", "", "my_malloc_wrapper"]:
        assert not cmd_heap.is_allocator_frame(frame(name)), name


def test_site_is_the_first_frame_outside_the_allocator():
    frames = [frame("operator new(unsigned long)"),
              frame("std::__new_allocator<int>::allocate(unsigned long, void const*)"),
              frame("std::vector<int, std::allocator<int> >::reserve(unsigned long)"),
              frame("build_index()"), frame("main")]
    assert cmd_heap.site_index(frames) == 2
    assert cmd_heap.site_index([frame("load_config()"), frame("main")]) == 0
    # Nothing but allocator frames (no symbols for the caller): the leaf.
    assert cmd_heap.site_index([frame("malloc"), frame("operator new(unsigned long)")]) == 0
    assert cmd_heap.site_index([]) == 0
