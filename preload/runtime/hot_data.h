// Hooks' hot data: the section that keeps the globals every recorded socket
// call reads (the TSC clock's word, tsc_clock.h, the TLS offset of the thread state, the fd
// table's pointer and size, the first real functions) together, in one cache
// line (`nm -C build/libflightrec.so | sort` shows the layout). The real call's trip through
// the kernel evicts the hook's lines, so each distinct line costs a fetch.
#pragma once

// Not a ".data.*" name: the linker would merge it into .data object by object
// (next to unrelated variables); an own output section keeps the objects'
// hot variables together, in link order.
#define FR_HOT_DATA __attribute__((section("flightrec_sock_hot")))
