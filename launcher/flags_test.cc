// The one flag parser (launcher/flags.h) as every command uses it: `mlrun`, `mlrun rdzv`,
// `mlrun doctor` and the sweep's ranks. Each case goes through the command's own parser.
#include "launcher/flags.h"

#include <functional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "doctor/bandwidth.h"
#include "doctor/doctor.h"
#include "launcher/options.h"
#include "launcher/rdzv_command.h"

namespace mlrun {
namespace {

using doctor::DoctorArgs;
using doctor::DoctorOptions;
using doctor::SweepOptions;
using ::testing::HasSubstr;
using Args = std::vector<std::string>;

// One case: the arguments, and either what they set or the error they give.
template <typename Parsed>
struct Case {
  Args args;
  std::function<bool(const Parsed&)> sets;  // Unset: the case is an error.
  std::string error;                        // A part of the first error.
};

template <typename Parsed>
void check(const std::vector<Case<Parsed>>& cases,
           const std::function<Parsed(const Args&, std::vector<std::string>&)>& parse) {
  for (const auto& c : cases) {
    std::vector<std::string> errors;
    Parsed parsed = parse(c.args, errors);
    std::string args = ::testing::PrintToString(c.args);
    if (c.sets) {
      EXPECT_TRUE(errors.empty()) << args << ": " << (errors.empty() ? "" : errors.front());
      EXPECT_TRUE(c.sets(parsed)) << args;
    } else {
      ASSERT_FALSE(errors.empty()) << args;
      EXPECT_THAT(errors.front(), HasSubstr(c.error)) << args;
    }
  }
}

TEST(Flags, LaunchBothSpellingsBothValueFormsAndErrors) {
  using O = Options;
  std::vector<Case<O>> cases = {
      {{"--nproc-per-node=4", "app"}, [](const O& o) { return o.nproc_per_node == "4"; }, ""},
      {{"--nproc_per_node", "4", "app"}, [](const O& o) { return o.nproc_per_node == "4"; }, ""},
      {{"--max-restarts", "3", "app"}, [](const O& o) { return o.max_restarts == 3; }, ""},
      {{"--max_restarts=3", "app"}, [](const O& o) { return o.max_restarts == 3; }, ""},
      {{"-H=a:2,b", "app"}, [](const O& o) { return o.hosts == "a:2,b"; }, ""},
      {{"--machinefile", "f", "app"}, [](const O& o) { return o.hostfile == "f"; }, ""},
      {{"--shutdown-timeout=7", "app"}, [](const O& o) { return o.grace_period == 7; }, ""},
      {{"--dry-run", "app"}, [](const O& o) { return o.dry_run; }, ""},
      {{"-vv", "-v", "app"}, [](const O& o) { return o.verbose == 3; }, ""},
      // argparse's attached short value (torchrun -r3 -t1); a short flag without a value is not
      // taken so (-vx stays unknown).
      {{"-r3", "-t1", "app"},
       [](const O& o) { return o.redirects.all == 3 && o.tee.all == 1; },
       ""},
      {{"-Ha:2", "app"}, [](const O& o) { return o.hosts == "a:2"; }, ""},
      {{"-vx", "app"}, nullptr, "unknown option '-vx' (see mlrun --help)"},
      {{"--", "-app", "--x"},
       [](const O& o) { return o.program == "-app" && o.program_args == Args{"--x"}; },
       ""},
      {{"--tee"}, nullptr, "option '--tee' needs a value"},
      {{"--no-such", "app"}, nullptr, "unknown option '--no-such' (see mlrun --help)"},
      {{"--dry-run=1", "app"}, nullptr, "option '--dry_run' takes no value"},
  };
  check<O>(cases, [](const Args& args, std::vector<std::string>& errors) {
    ParseResult r = parse_options(args);
    for (auto& e : r.errors) errors.push_back(e.message);
    return r.options;
  });
}

TEST(Flags, RdzvBothSpellingsBothValueFormsAndErrors) {
  using O = RdzvOptions;
  std::vector<Case<O>> cases = {
      {{"--job_id", "j"}, [](const O& o) { return o.job_id == "j"; }, ""},
      {{"--job-id=j"}, [](const O& o) { return o.job_id == "j"; }, ""},
      {{"--torch_store"}, [](const O& o) { return o.torch_store; }, ""},
      {{"--max_memory=64", "--max-hold", "9"},
       [](const O& o) { return o.max_memory_mib == 64 && o.max_hold_s == 9; },
       ""},
      {{"--port=0"}, [](const O& o) { return o.port == 0; }, ""},
      {{"--port"}, nullptr, "--port needs a value"},
      {{"--port", "x"}, nullptr, "--port x: not a port number"},
      {{"--bogus"}, nullptr, "unknown argument \"--bogus\" (mlrun rdzv --help)"},
      {{"--torch-store=1"}, nullptr, "--torch-store takes no value"},
      {{"--token", "abc"}, nullptr, "a token in argv is visible"},
      {{"--token"}, nullptr, "a token in argv is visible"},
  };
  check<O>(cases, [](const Args& args, std::vector<std::string>& errors) {
    return parse_rdzv_args(args, errors);
  });
}

TEST(Flags, DoctorBothSpellingsBothValueFormsAndErrors) {
  using O = DoctorOptions;
  std::vector<Case<O>> cases = {
      {{"--ssh_timeout_ms=5"}, [](const O& o) { return o.ssh_timeout_ms == 5; }, ""},
      {{"--ssh-timeout-ms", "5"}, [](const O& o) { return o.ssh_timeout_ms == 5; }, ""},
      {{"--probe_timeout", "9", "--timeout-ms=8"},
       [](const O& o) { return o.probe_timeout_s == 9 && o.timeout_ms == 8; },
       ""},
      {{"--hosts=a,b"}, [](const O& o) { return o.hosts == "a,b"; }, ""},
      {{"--bandwidth", "-H", "a,b", "-b", "1K", "--maxbytes=4K", "--op_timeout", "3"},
       [](const O& o) {
         return o.sweep.min_bytes == 1024 && o.sweep.max_bytes == 4096 && o.sweep.timeout_s == 3;
       },
       ""},
      {{"--iface"}, nullptr, "doctor: --iface needs a value"},
      {{"--python_timeout"}, nullptr, "doctor: --python-timeout needs a value"},
      {{"--bogus"}, nullptr, "doctor: unknown argument '--bogus'"},
      {{"-n", "3"}, nullptr, "go with --bandwidth"},
      {{"--json=1"}, nullptr, "doctor: --json takes no value"},
  };
  check<O>(cases, [](const Args& args, std::vector<std::string>& errors) {
    DoctorArgs r = doctor::parse_doctor_args(args);
    errors = r.errors;
    return r.options;
  });
}

TEST(Flags, SweepFlagsInBothForms) {
  SweepOptions o;
  std::vector<std::string> errors;
  FlagSyntax syntax{[](const std::string& a) { return "unknown " + a; },
                    [](const std::string& f, const Flag&) { return "no value " + f; },
                    [](const std::string& f, const Flag&) { return "a value " + f; }};
  Args args = {"-n=3", "--warmup-iters", "0", "--stepfactor=4", "-w"};
  EXPECT_EQ(parse_flags(doctor::sweep_flag_table(o, errors), args, syntax, errors), args.size());
  EXPECT_EQ(o.iters, 3);
  EXPECT_EQ(o.warmup, 0);
  EXPECT_EQ(o.factor, 4);
  EXPECT_EQ(errors, (std::vector<std::string>{"no value -w"}));
}

// Every name of every flag a table shows is in the usage generated from it.
void expect_usage_names_every_flag(const FlagTable& table, const std::string& usage) {
  ASSERT_FALSE(table.empty());
  for (const auto& flag : table) {
    if (flag.hidden) continue;
    for (const auto& name : flag.names) {
      bool shown = usage.find("  " + name + " ") != std::string::npos ||
                   usage.find("  " + name + ",") != std::string::npos ||
                   usage.find(", " + name + " ") != std::string::npos ||
                   usage.find(", " + name + ",") != std::string::npos ||
                   usage.find(", " + name + "\n") != std::string::npos;
      EXPECT_TRUE(shown) << name;
    }
    if (flag.takes_value()) {
      EXPECT_THAT(usage, HasSubstr(" " + flag.value)) << flag.names.front();
    }
    EXPECT_THAT(usage, HasSubstr(flag.help.substr(0, 20))) << flag.names.front();
  }
}

TEST(Flags, UsageShowsEveryFlagOfTheTable) {
  Options launch;
  RdzvOptions rdzv;
  DoctorArgs doctor;
  SweepOptions sweep;
  bool sweep_given = false;
  std::vector<std::string> errors;
  expect_usage_names_every_flag(launch_flag_table(launch, errors), usage());
  expect_usage_names_every_flag(rdzv_flag_table(rdzv, errors), rdzv_usage());
  expect_usage_names_every_flag(doctor::doctor_flag_table(doctor, sweep_given),
                                doctor::doctor_usage());
  expect_usage_names_every_flag(doctor::sweep_flag_table(sweep, errors), doctor::doctor_usage());
  EXPECT_THAT(rdzv_usage(), HasSubstr("There is no --token flag"));
}

TEST(Flags, UsageWrapsHelpIntoItsColumn) {
  FlagTable table = {
      {.names = {"--short", "-s"}, .value = "N", .help = "one line", .group = "heading:"},
      {.names = {"--a-rather-long-flag-name"},
       .value = "VALUE|OTHER",
       .help = std::string(30, 'a') + " " + std::string(30, 'b') + " " + std::string(30, 'c')},
  };
  EXPECT_EQ(flags_usage(table),
            "heading:\n"
            "  -s, --short N                    one line\n"
            "  --a-rather-long-flag-name VALUE|OTHER\n"
            "                                   " +
                std::string(30, 'a') + " " + std::string(30, 'b') +
                "\n"
                "                                   " +
                std::string(30, 'c') + "\n");
}

// torchrun's comma_separated_list, as --duplicate_stdout_filters reads it.
TEST(Flags, CommaListsSplitOnCommasAndKeepDoubledOnes) {
  using V = std::vector<std::string>;
  EXPECT_EQ(parse_comma_list(""), V{});
  EXPECT_EQ(parse_comma_list("apple"), V{"apple"});
  EXPECT_EQ(parse_comma_list("apple,orange"), (V{"apple", "orange"}));
  EXPECT_EQ(parse_comma_list("a,,b,c"), (V{"a,b", "c"}));
  EXPECT_EQ(parse_comma_list("a,,,b"), (V{"a,", "b"}));
  EXPECT_EQ(parse_comma_list(",,"), V{","});
  EXPECT_EQ(parse_comma_list("a,"), (V{"a", ""}));
}

}  // namespace
}  // namespace mlrun
