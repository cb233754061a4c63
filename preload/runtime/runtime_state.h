// Runtime state shared between the lifecycle (init/shutdown/fork), the thread
// registry and the flush thread. Internal to preload/.
#pragma once

namespace flightrec {

// True from a successful init until shutdown starts. Hot paths read it.
bool RuntimeRecording();
void SetRuntimeRecording(bool on);

// Creates the pthread key whose destructor retires exiting threads.
void InitThreadRegistry();

}  // namespace flightrec
