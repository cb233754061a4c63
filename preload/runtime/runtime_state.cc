// Runtime state: the global recording switch (see runtime_state.h).
#include "preload/runtime/runtime_state.h"

#include <atomic>

namespace flightrec {
namespace {
std::atomic<bool> g_recording{false};
}
bool RuntimeRecording() { return g_recording.load(std::memory_order_relaxed); }
void SetRuntimeRecording(bool on) { g_recording.store(on, std::memory_order_release); }
}  // namespace flightrec
