#include "worker/output.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
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
    console_line_ended();  // The user answered the prompt.
    out.on_data("42\nrest");
    out.on_eof();
    EXPECT_EQ(out.tail().lines(), (std::deque<std::string>{"line", "(Pdb) ", "42", "rest"}));
  }
  close(console[1]);
  EXPECT_EQ(read_all(console[0]), "[0] line\n[0] (Pdb) [0] 42\n[0] rest\n");
  close(console[0]);
}

// A progress bar (tqdm) redraws its line with '\r' and ends it only when done: each redraw keeps
// the tag, and the parts shown before the line ends go on untagged where nothing came between.
TEST(StreamOutput, AProgressBarKeepsItsTagAsItRedraws) {
  int console[2];
  ASSERT_EQ(pipe(console), 0);
  {
    StreamOutput bar(StreamRoute{console[1], "[0] ", -1, true}, 5);
    StreamOutput other(StreamRoute{console[1], "[1] ", -1, false}, 5);
    bar.on_data("  0%\r 10%");
    bar.flush_partial();
    bar.on_data("\r 20%");
    bar.flush_partial();
    bar.on_data("\r100%\nloading... ");
    bar.flush_partial();
    bar.on_data("done\nslow ");
    bar.flush_partial();
    other.on_data("hello\n");  // Another rank's line between: the rest is tagged again.
    bar.on_data("end\r\n");    // A "\r\n" line end adds no tag.
  }
  close(console[1]);
  EXPECT_EQ(read_all(console[0]),
            "[0]   0%\r[0]  10%\r[0]  20%\r[0] 100%\n[0] loading... done\n[0] slow [1] hello\n"
            "[0] end\r\n");
  close(console[0]);
}

// One line of a megabyte on stderr would be the whole failure summary: the tail keeps its start.
TEST(LineTail, KeepsTheStartOfAVeryLongLine) {
  LineTail tail(2);
  tail.push(std::string(kTailLineBytes + 100, 'x'));
  tail.push("short");
  ASSERT_EQ(tail.lines().size(), 2u);
  EXPECT_EQ(tail.lines()[0], std::string(kTailLineBytes, 'x') + "... (100 bytes more)");
  EXPECT_EQ(tail.lines()[1], "short");
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

// The stall console_write waits for is the process's: a person's terminal gets kConsoleStall,
// an agent's parent relay kRelayStall (launcher/agent_command.cc). A reader that comes back
// within it loses nothing; past it the lines are dropped, counted, and said when it reads again.
TEST(ConsoleWrite, AReaderBackWithinTheStallLosesNothingAndPastItTheDropIsSaid) {
  EXPECT_EQ(console_stall(), kConsoleStall);
  std::string data;
  for (int i = 0; i < 2000; ++i) data += fmt::format("line {} {}\n", i, std::string(100, 'y'));
  ASSERT_GT(data.size(), 3u * 65536);  // More than a pipe holds.

  set_console_stall(std::chrono::seconds(5));
  int console[2];
  ASSERT_EQ(pipe(console), 0);
  std::string got;
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // Past a person's second.
    got = read_all(console[0]);
  });
  EXPECT_TRUE(console_write(console[1], data));
  close(console[1]);
  late.join();
  close(console[0]);
  EXPECT_EQ(got, data);
  EXPECT_EQ(console_dropped_lines(), 0u);

  set_console_stall(std::chrono::milliseconds(200));
  ASSERT_EQ(pipe(console), 0);
  EXPECT_TRUE(console_write(console[1], data));  // Nobody reads: returns after the stall.
  std::size_t dropped = console_dropped_lines();
  EXPECT_GT(dropped, 0u);
  got.clear();  // The reader is back: it empties the pipe, then the next line comes.
  fcntl(console[0], F_SETFL, O_NONBLOCK);
  char buffer[65536];
  for (ssize_t n; (n = read(console[0], buffer, sizeof buffer)) > 0;) got.append(buffer, n);
  fcntl(console[0], F_SETFL, 0);
  EXPECT_TRUE(console_write(console[1], "after\n"));
  close(console[1]);
  got += read_all(console[0]);
  close(console[0]);
  set_console_stall(kConsoleStall);
  std::string note = fmt::format(
      "mlrun: {} lines of output dropped here: nothing read them for 200 ms\nafter\n", dropped);
  ASSERT_GE(got.size(), note.size());
  EXPECT_EQ(got.substr(got.size() - note.size()), note);
  // Whole lines only: what the pipe took, then the note and the next line.
  EXPECT_EQ(static_cast<std::size_t>(std::count(got.begin(), got.end(), '\n')), 2000 - dropped + 2);
}

}  // namespace
}  // namespace mlrun
