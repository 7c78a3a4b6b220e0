/* An MPI world check for `mlrun --backend mpi`: every rank contributes its rank number to an
 * MPI_Allreduce(SUM); each checks the sum against n(n-1)/2. A rank started without mpirun is a
 * singleton world of size 1, so a passing run with the expected size shows a real MPI world.
 *
 * Usage: mpi_allreduce [EXPECTED_WORLD_SIZE]
 * Exit status: 0 when the sum (and the world size, when given) is right, 1 otherwise. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  /* 64-bit: n(n-1)/2 overflows int beyond 65,536 ranks. */
  long long mine = rank;
  long long sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  long long expected = (long long)size * (size - 1) / 2;

  int ok = sum == expected;
  if (argc > 1) {
    long want = strtol(argv[1], NULL, 10);
    if (want != size) {
      fprintf(stderr, "rank %d: world size %d, expected %ld\n", rank, size, want);
      ok = 0;
    }
  }
  char host[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(host, &len);
  if (sum != expected) {
    fprintf(stderr, "rank %d/%d on %s: allreduce sum %lld, expected %lld\n", rank, size, host, sum,
            expected);
  } else {
    printf("rank %d/%d on %s: allreduce sum %lld == n(n-1)/2 %s\n", rank, size, host, sum,
           ok ? "ok" : "but the world size is wrong");
  }
  fflush(stdout);
  MPI_Finalize();
  return ok ? 0 : 1;
}
