// Opening the output directory by path without letting another user steer
// where it leads: the path is walked from "/" one component at a time
// (openat with O_NOFOLLOW|O_DIRECTORY), each directory checked on the
// descriptor just opened, so the files we create, rename and delete are in
// the directory we checked, never in the target of someone's symlink.
//
// The policy (docs/LIMITS.md, "Output directory"):
//  * every directory on the way is owned by root or by us, and is not
//    writable by other users (group-writable counts unless the group is our
//    effective gid) unless it is sticky, like /tmp;
//  * a symlink on the way is followed only if root or we own it (/var/run ->
//    /run); the last component is never a symlink;
//  * the directory itself is ours (or, with allow_foreign, anyone's), and if
//    other users can write to it, it must be sticky and ours: they may then
//    add files but never rename or delete ours.
// Not a hot path: the flush thread, the uploader, a privilege drop.
#pragma once
#include <string>

namespace flightrec {

// A descriptor (one of ours: high and protected, preload/fds/fd_guard.h) on
// the directory at the absolute `path`, or -1 with a one-line reason in
// *error and errno set (ELOOP/EPERM for a refused component). create: make
// missing components, mode 0700.
int OpenDirectoryPathSafely(const std::string& path, bool create, bool allow_foreign, std::string* error);

}  // namespace flightrec
