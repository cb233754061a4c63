// pipeline_bench: drives the whole recorder pipeline at a fixed record rate
// by renaming the calling thread (each pthread_setname_np through the
// preload pushes one thread.name record that the flush thread decodes,
// interns, encodes and compresses). Runs for a fixed time, then reports its
// own CPU and the flush thread's CPU (from /proc/self/task/*/stat).
//   pipeline_bench RATE SECONDS
#include <dirent.h>
#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

static double ThreadCpuSeconds(const char* want_name) {
  DIR* d = opendir("/proc/self/task");
  double total = 0;
  while (dirent* e = d ? readdir(d) : nullptr) {
    if (e->d_name[0] == '.') continue;
    std::string base = std::string("/proc/self/task/") + e->d_name;
    char comm[64] = {};
    FILE* f = fopen((base + "/comm").c_str(), "r");
    if (!f) continue;
    if (!fgets(comm, sizeof(comm), f)) comm[0] = 0;
    fclose(f);
    comm[strcspn(comm, "\n")] = 0;
    if (strcmp(comm, want_name) != 0) continue;
    f = fopen((base + "/stat").c_str(), "r");
    if (!f) continue;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    const char* p = strrchr(buf, ')');
    unsigned long utime = 0, stime = 0;
    // Fields after ')': state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
    if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) == 2)
      total += static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  if (d) closedir(d);
  return total;
}

int main(int argc, char** argv) {
  const long rate = argc > 1 ? atol(argv[1]) : 100000;
  const double seconds = argc > 2 ? atof(argv[2]) : 5.0;
  pthread_setname_np(pthread_self(), "bench-main");
  const auto start = std::chrono::steady_clock::now();
  long sent = 0;
  char name[16];
  for (;;) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed >= seconds) break;
    const long due = static_cast<long>(elapsed * static_cast<double>(rate));
    while (sent < due) {
      snprintf(name, sizeof(name), "b-%ld", sent % 1000);
      pthread_setname_np(pthread_self(), name);
      ++sent;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  printf("records %ld wall_s %.3f rate %.0f flush_cpu_s %.3f\n", sent, wall, static_cast<double>(sent) / wall,
         ThreadCpuSeconds("flightrec-flush"));
  return 0;
}
