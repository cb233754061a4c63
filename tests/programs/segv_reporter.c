/* A program with its own SIGSEGV reporter (as servers have: print what
 * crashed, then exit with a code of their own) that calls through a
 * dangling function pointer: the pc itself is unmapped, so anything that
 * unwinds from the faulting frame reads a bad address.
 * Prints "reporter ran" from the handler and exits 42. */
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void Reporter(int sig) {
  (void)sig;
  static const char msg[] = "reporter ran\n";
  ssize_t w = write(1, msg, sizeof(msg) - 1);
  (void)w;
  _exit(42);
}

int main(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = Reporter;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, NULL);
  void* page = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  munmap(page, 4096);
  void (*dangling)(void) = (void (*)(void))page;
  /* Some work first, so the recorder is up and sampling. */
  volatile unsigned long x = 0;
  for (unsigned long i = 0; i < 20000000ul; ++i) x += i;
  dangling();
  return 0;
}
