// Uploader: the "flightrec-upload" recorder thread that ships sealed
// segments to S3 (issue 6).
//
// Wiring (preload/runtime/lifecycle.cc): UploaderInit(config) at init, after the
// flush registry exists; UploaderAtFork() in a forked child. With an empty
// FLIGHTREC_S3_BUCKET nothing happens. Otherwise UploaderInit resolves the
// endpoint, snapshots the AWS_* environment, registers a seal hook (enqueue
// and signal, never blocks) and a shutdown hook (ship what it can until the
// deadline, then return), and starts the thread. The thread loads and
// initialises libcurl/OpenSSL itself (nothing that can block runs in the
// constructor: OpenSSL reads the configuration file the environment names),
// then scans
// FLIGHTREC_OUTPUT (as root, its uid-N subdirectories too) for segments left
// by earlier runs. After a privilege drop the seal hook hands the thread a
// descriptor of the pinned OUTPUT/uid-N, where it works from then on
// (uploader/upload_queue.h).
//
// The thread never records itself (MarkRecorderThread), runs with every
// signal blocked, and never slows the host: a slow or dead S3 only delays
// uploads; segments wait on disk (uploader/upload_queue.h).
//
// At exit the shutdown hook returns by the deadline whatever S3 does; after
// it returns, the thread never calls into libcurl/OpenSSL again, so the
// exiting process cannot pull them out from under it.
#pragma once
#include <ctime>
#include <string>
#include <string_view>

#include "preload/runtime/config.h"

namespace flightrec {

void UploaderInit(const Config& config);
// Forked child (pthread_atfork child handler, async-signal-safe): forget the
// parent's thread. A child that lives at least 5 s starts its own uploader at
// its next seal; a short-lived child never waits for uploads at exit, and its
// segments are shipped by the parent (which rescans periodically and at exit)
// or by the next run.
void UploaderAtFork();

namespace uploader {

// Splits a sealed segment name "<yyyymmddThhmmss.mmmZ>-<service>-<pid>-<seq>.seg"
// (preload/flush/segment_files.h) into its service and its UTC time (seconds).
// False for names of any other shape. A segment kept for an incident is
// named "<...>-<seq>@<tag>.seg" (tag: the incident's UTC stamp, same shape
// as the segment's); with `incident`, that tag goes there ("" if none), its
// time in *incident_utc_seconds, and the pid in *pid.
bool ParseSegmentName(std::string_view name, std::string* service, time_t* utc_seconds, std::string* incident = nullptr,
                      time_t* incident_utc_seconds = nullptr, std::string* pid = nullptr);

}  // namespace uploader
}  // namespace flightrec
