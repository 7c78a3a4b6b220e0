#include "worker/output.h"

#include <fcntl.h>
#include <unistd.h>

#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace mlrun {
namespace {

std::vector<std::string> split_all(std::vector<std::string_view> chunks) {
  LineSplitter s;
  std::vector<std::string> lines;
  auto add = [&](std::string_view l) { lines.emplace_back(l); };
  for (auto c : chunks) s.feed(c, add);
  s.finish(add);
  return lines;
}

TEST(LineSplitter, JoinsLinesAcrossChunks) {
  EXPECT_EQ(split_all({"ab", "c\nde", "f\n\ng"}),
            (std::vector<std::string>{"abc", "def", "", "g"}));
}

TEST(LineSplitter, CutsOverlongLines) {
  std::string big(kMaxLineBytes * 2 + 5, 'x');
  auto lines = split_all({big});
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].size(), kMaxLineBytes);
  EXPECT_EQ(lines[2].size(), 5u);
}

TEST(LineTail, KeepsTheLastLines) {
  LineTail t(2);
  t.push("a");
  t.push("b");
  t.push("c");
  EXPECT_EQ(t.lines(), (std::deque<std::string>{"b", "c"}));
}

std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  return out;
}

TEST(StreamOutput, PrefixesWholeLinesAndCopiesRawBytesToTheFile) {
  int console[2];
  ASSERT_EQ(pipe(console), 0);
  char path[] = "/tmp/mlrun_output_test_XXXXXX";
  int file = mkstemp(path);
  ASSERT_GE(file, 0);
  {
    StreamOutput out(StreamRoute{console[1], "[3] ", file, true}, 5);
    out.on_data("hello\nwor");
    out.on_data("ld\npartial");
    out.on_eof();
    EXPECT_EQ(out.tail().lines(), (std::deque<std::string>{"hello", "world", "partial"}));
  }
  close(console[1]);
  EXPECT_EQ(read_all(console[0]), "[3] hello\n[3] world\n[3] partial\n");
  close(console[0]);
  int again = open(path, O_RDONLY);
  EXPECT_EQ(read_all(again), "hello\nworld\npartial");
  close(again);
  unlink(path);
}

TEST(StreamOutput, FlushesAnUnfinishedLineTaggedAndWithoutANewline) {
  int console[2];
  ASSERT_EQ(pipe(console), 0);
  {
    StreamOutput out(StreamRoute{console[1], "[0] ", -1, true}, 5);
    out.on_data("line\n(Pdb) ");
    EXPECT_TRUE(out.has_partial());
    out.flush_partial();
    EXPECT_FALSE(out.has_partial());
    out.flush_partial();  // Nothing held: nothing written.
    out.on_data("42\nrest");
    out.on_eof();
    EXPECT_EQ(out.tail().lines(), (std::deque<std::string>{"line", "(Pdb) ", "42", "rest"}));
  }
  close(console[1]);
  EXPECT_EQ(read_all(console[0]), "[0] line\n[0] (Pdb) [0] 42\n[0] rest\n");
  close(console[0]);
}

// Two ranks' streams share one DuplicateLog (torchrun's filtered_stdout.log): the lines holding a
// needle, with each stream's prefix, in order; the file closes with the last stream.
TEST(StreamOutput, DuplicatesTheLinesThatHoldANeedleToASharedFile) {
  char path[] = "/tmp/mlrun_output_test_XXXXXX";
  int file = mkstemp(path);
  ASSERT_GE(file, 0);
  {
    auto dup = std::make_shared<const DuplicateLog>(file, std::vector<std::string>{"apple", "o,r"});
    StreamOutput r0(StreamRoute{-1, "[default0]:", -1, false, {}, dup}, 0);
    StreamOutput r1(StreamRoute{-1, "[default1]:", -1, false, {}, dup}, 0);
    dup.reset();
    r0.on_data("an apple\nno match\n");
    r1.on_data("o,r here\nor not\npine");
    r1.on_data("apple\n");
    r0.on_data("apple without a newline");
    r0.on_eof();
    r1.on_eof();
  }
  EXPECT_EQ(fcntl(file, F_GETFD), -1) << "the file outlived its last stream";
  int again = open(path, O_RDONLY);
  EXPECT_EQ(read_all(again),
            "[default0]:an apple\n[default1]:o,r here\n[default1]:pineapple\n"
            "[default0]:apple without a newline\n");
  close(again);
  unlink(path);
}

// Two threads of one process write to one console: an agent's loop its own workers' lines, its
// relay those of the agents it started (the launch tree), a head's relay and its own node's
// loop. Each chunk of whole lines reaches the pipe whole: before, chunks were cut every
// PIPE_BUF bytes, mid-line, and the other thread's write came between the pieces.
TEST(StreamOutput, TwoThreadsOnOneConsoleNeverSplitALine) {
  int console[2];
  ASSERT_EQ(pipe(console), 0);
  std::string got;
  std::thread reader([&] { got = read_all(console[0]); });
  const std::string pad(150, 'x');
  auto writer = [&](const std::string& tag) {
    StreamOutput out(StreamRoute{console[1], tag, -1, false}, 0);
    for (int chunk = 0; chunk < 200; ++chunk) {
      std::string data;
      for (int i = 0; i < 40; ++i) data += fmt::format("line {} {}\n", chunk * 40 + i, pad);
      out.on_data(data);  // ~6.5 KB: more than PIPE_BUF.
    }
  };
  std::thread a(writer, "[a] ");
  std::thread b(writer, "[b] ");
  a.join();
  b.join();
  close(console[1]);
  reader.join();
  close(console[0]);
  std::size_t lines = 0, whole = 0, start = 0;
  for (std::size_t end; (end = got.find('\n', start)) != std::string::npos; start = end + 1) {
    std::string_view line(got.data() + start, end - start);
    ++lines;
    bool tagged = line.rfind("[a] line ", 0) == 0 || line.rfind("[b] line ", 0) == 0;
    if (tagged && line.size() > pad.size() && line.find('[', 1) == std::string_view::npos &&
        line.substr(line.size() - pad.size()) == pad) {
      ++whole;
    }
  }
  EXPECT_EQ(lines, 2u * 200 * 40);
  EXPECT_EQ(whole, lines) << "lines cut by the other thread's output";
}

}  // namespace
}  // namespace mlrun
