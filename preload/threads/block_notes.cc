// The state behind block_notes.h.
#include "preload/threads/block_notes.h"

namespace flightrec {

__thread bool t_block_notes __attribute__((tls_model("initial-exec"))) = false;
std::atomic<bool> g_block_notes_retired{false};
std::atomic<BlockNoteFn> g_block_note{nullptr};

}  // namespace flightrec
