// The floor for bench/: start N copies of a program with posix_spawn, then wait for all of them.
// No pipes, no process groups, no environment work: what any launcher must at least pay.
//
//   raw_spawn N PROGRAM [ARGS...]    exit 0 if every copy exited 0, else 1
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

extern char** environ;

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s N PROGRAM [ARGS...]\n", argv[0]);
    return 2;
  }
  long n = strtol(argv[1], NULL, 10);
  if (n <= 0) {
    fprintf(stderr, "raw_spawn: bad count %s\n", argv[1]);
    return 2;
  }
  int failed = 0;
  long started = 0;
  for (long i = 0; i < n; ++i) {
    pid_t pid;
    int rc = posix_spawn(&pid, argv[2], NULL, NULL, argv + 2, environ);
    if (rc != 0) {
      fprintf(stderr, "raw_spawn: %s: %s\n", argv[2], strerror(rc));
      failed = 1;
      break;
    }
    ++started;
  }
  for (long i = 0; i < started; ++i) {
    int status;
    if (wait(&status) < 0) {
      if (errno == EINTR) {
        --i;
        continue;
      }
      break;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  }
  return failed;
}
