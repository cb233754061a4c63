// euid_return ROUNDS: started as root, works a while as another user with
// only its effective uid switched (seteuid(65534)), then switches back
// (seteuid(0)) and works on as root: a root daemon doing one job as a user.
// As the user it makes ROUNDS allocations of AS_USER bytes, back as root
// ROUNDS of AS_ROOT bytes (sampled each under FLIGHTREC_ALLOC_SAMPLE_BYTES=1,
// so the trace shows which side of the switch each segment holds).
// Prints "as-user euid=65534" and "back euid=0".
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define NOBODY 65534
#define AS_USER 1111
#define AS_ROOT 2222

static void* volatile g_block;

static void allocate(int rounds, size_t size) {
  for (int i = 0; i < rounds; ++i) {
    char* p = malloc(size);
    if (!p) exit(3);
    g_block = p;  // escapes: the compiler keeps the malloc/free pair
    free(p);
  }
}

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? atoi(argv[1]) : 1000;
  if (seteuid(NOBODY) != 0) return 1;
  printf("as-user euid=%u\n", geteuid());
  allocate(rounds, AS_USER);
  usleep(300 * 1000);  // the recorder opens its segment as the user
  if (seteuid(0) != 0) return 2;
  printf("back euid=%u\n", geteuid());
  allocate(rounds, AS_ROOT);
  usleep(300 * 1000);
  return 0;
}
