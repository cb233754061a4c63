// Socket hot data: the section that keeps the globals every recorded socket
// call reads (the clock choice, the fd table's pointer and size, the first
// real functions) together, in one cache line. The real call's trip through
// the kernel evicts the hook's lines, so each distinct line costs a fetch.
#pragma once

#define FR_SOCK_HOT_DATA __attribute__((section(".data.flightrec_sock_hot")))
