#include "launcher/summary.h"

#include <signal.h>

#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>

namespace mlrun {
namespace {

WorkerState worker(int rank, pid_t pid, WorkerEnd end, int status) {
  WorkerState w;
  w.spec.rank = rank;
  w.spec.local_rank = rank;
  w.pid = pid;
  w.end = end;
  w.wait_status = status;
  return w;
}

TEST(Summary, NamesTheFirstFailureThenTheOthers) {
  AttemptResult r;
  r.workers = {worker(0, 10, WorkerEnd::kStopped, SIGTERM),
               worker(1, 11, WorkerEnd::kFailed, 3 << 8),
               worker(2, 12, WorkerEnd::kFailed, SIGSEGV),
               worker(3, 13, WorkerEnd::kStopped, SIGTERM)};
  r.first_failure = 1;
  std::vector<std::deque<std::string>> tails(4);
  tails[1] = {"Traceback", "ValueError: boom"};
  SummaryContext ctx{"node 0 (box)", [](const WorkerState& w) {
                       return w.spec.rank == 1 ? std::string("ValueError: boom") : std::string();
                     }};
  std::string s = format_failure_summary(r, tails, ctx);
  EXPECT_NE(s.find("First failure: rank 1 (local rank 1, node 0 (box), pid 11): exit code 3"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("  error: ValueError: boom"), std::string::npos);
  EXPECT_NE(s.find("    | Traceback\n    | ValueError: boom\n"), std::string::npos);
  EXPECT_NE(s.find("also failed: rank 2 (local rank 2, pid 12): signal SIGSEGV (11)"),
            std::string::npos);
  EXPECT_NE(s.find("stopped by mlrun: ranks 0,3"), std::string::npos);
}

TEST(Summary, ReadsTorchElasticErrorFiles) {
  std::string path = ::testing::TempDir() + "/error.json";
  std::ofstream(path) << R"({"message": {"message": "RuntimeError: bad", "extraInfo": {}}})";
  EXPECT_EQ(read_error_file_message(path), "RuntimeError: bad");
  std::ofstream(path) << "not json";
  EXPECT_EQ(read_error_file_message(path), "");
  EXPECT_EQ(read_error_file_message(path + ".missing"), "");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace mlrun
