// Teardown benchmark helper: write the current CLOCK_REALTIME time (seconds, 9 decimals) to FILE,
// then exit with CODE at once. The harness compares it with the launcher's exit time.
//
//   stamp_exit FILE CODE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s FILE CODE\n", argv[0]);
    return 2;
  }
  int code = atoi(argv[2]);
  char line[64];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int len = snprintf(line, sizeof line, "%lld.%09ld\n", (long long)ts.tv_sec, ts.tv_nsec);
  int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    (void)!write(fd, line, (size_t)len);
    close(fd);
  }
  _exit(code);
}
