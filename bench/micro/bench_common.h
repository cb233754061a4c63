// bench_common.h: what the micro benchmarks that run themselves as child
// processes share: the thread CPU clock, a median, and running this binary
// again under a chosen environment to collect the numbers it prints.
#pragma once

#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace bench {

inline double ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs this binary again as `arg0 mode`, with this process's environment
// minus LD_PRELOAD and FLIGHTREC_* plus extra_env (so every side starts
// from the same environment). True when the child exits 0 having printed
// at least `want` numbers; they go to *values.
inline bool RunSelf(const char* arg0, const char* mode, const std::vector<std::string>& extra_env, size_t want,
                    std::vector<double>* values) {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) return false;
  self[len] = '\0';
  std::vector<std::string> env_store;
  for (char** e = environ; *e; ++e)
    if (strncmp(*e, "LD_PRELOAD=", 11) != 0 && strncmp(*e, "FLIGHTREC_", 10) != 0) env_store.push_back(*e);
  for (const auto& e : extra_env) env_store.push_back(e);
  std::vector<char*> envp;
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  int out[2];
  if (pipe(out) != 0) return false;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  std::string name = arg0, arg1 = mode;
  char* argv[] = {name.data(), arg1.data(), nullptr};
  pid_t pid;
  const int rc = posix_spawn(&pid, self, &fa, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  if (rc != 0) {
    close(out[0]);
    return false;
  }
  char text[256] = {};
  ssize_t n = 0, got;
  while (n < static_cast<ssize_t>(sizeof(text)) - 1 && (got = read(out[0], text + n, sizeof(text) - 1 - n)) > 0)
    n += got;
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return false;
  values->clear();
  char* p = text;
  for (size_t i = 0; i < want; ++i) {
    char* end;
    const double v = strtod(p, &end);
    if (end == p) return false;
    values->push_back(v);
    p = end;
  }
  return true;
}

}  // namespace bench
