// Stack limits shared by every producer that records a stack (the CPU and
// off-CPU samplers, the allocation profiler, crash capture) and by the
// unwinders in this room that fill them.
#pragma once
#include <cstdint>

namespace flightrec::stacks {

// Deepest stack any producer records (frames beyond are cut, leaf kept).
inline constexpr int kMaxFrames = 128;
// The outermost "pc" of a stack that was cut at its depth limit while it
// went on: the symbolizer names it "[truncated]", so a report's root says
// the stack is incomplete instead of showing some deep frame as the root
// (deep recursion). Not a user-space address: never a real pc.
inline constexpr uint64_t kTruncatedStackPc = 0xfffffffffffff001ull;

}  // namespace flightrec::stacks
