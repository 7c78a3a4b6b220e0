#include "launcher/options.h"

#include <map>
#include <memory>

#include <gtest/gtest.h>

namespace mlrun {
namespace {

ParseResult parse(std::vector<std::string> args) {
  return parse_options(args);
}

TEST(Options, StoreIsMlrunByDefaultAndTorchOnRequest) {
  EXPECT_EQ(parse({"app"}).options.store, "mlrun");
  EXPECT_EQ(parse({"--store", "torch", "app"}).options.store, "torch");
  auto bad = parse({"--store=redis", "app"});
  ASSERT_EQ(bad.errors.size(), 1u);
  EXPECT_NE(bad.errors[0].message.find("--store"), std::string::npos);
}

TEST(Options, TorchrunCommandLineInBothSpellings) {
  auto r = parse({"--nproc-per-node=4",
                  "--nnodes",
                  "1",
                  "--master_addr=127.0.0.1",
                  "--master-port",
                  "29500",
                  "--max_restarts=2",
                  "--monitor-interval=5",
                  "--role",
                  "trainer",
                  "--log-dir",
                  "/tmp/l",
                  "-r",
                  "3",
                  "--tee=0:1,1:2",
                  "--local-ranks-filter=0,2",
                  "--standalone",
                  "train.py",
                  "--lr",
                  "0.1"});
  ASSERT_TRUE(r.errors.empty()) << r.errors[0].message;
  const Options& o = r.options;
  EXPECT_EQ(o.nproc_per_node, "4");
  EXPECT_EQ(o.master_port, 29500);
  EXPECT_EQ(o.max_restarts, 2);
  EXPECT_EQ(o.role, "trainer");
  EXPECT_EQ(o.log_dir, "/tmp/l");
  EXPECT_EQ(o.redirects.all, 3);
  EXPECT_EQ(o.tee.for_local_rank(1), 2);
  EXPECT_EQ(o.tee.for_local_rank(5), 0);
  EXPECT_EQ(*o.local_ranks_filter, (std::vector<int>{0, 2}));
  EXPECT_TRUE(o.standalone);
  EXPECT_EQ(o.program, "train.py");
  // Options after the program belong to the program.
  EXPECT_EQ(o.program_args, (std::vector<std::string>{"--lr", "0.1"}));
}

TEST(Options, NodeArgsKeepWhatAgentsNeed) {
  auto r = parse({"--hostfile", "h", "-np", "4", "-x", "A=1", "--max-restarts=2", "--tee", "3",
                  "-m", "--nproc_per_node=2", "pkg.mod", "--x"});
  ASSERT_TRUE(r.errors.empty());
  EXPECT_EQ(r.options.node_args,
            (std::vector<std::string>{"--max_restarts", "2", "--tee", "3", "--module"}));
  EXPECT_TRUE(r.options.nproc_given);
}

TEST(Options, StdinModeIsTheHeadsAndChecked) {
  EXPECT_EQ(parse({"train.py"}).options.stdin_mode, "rank0");
  auto r = parse({"-H", "a,b", "--stdin", "none", "train.py"});
  ASSERT_TRUE(r.errors.empty());
  EXPECT_EQ(r.options.stdin_mode, "none");
  EXPECT_TRUE(r.options.node_args.empty());  // Agents never give their stdin away.
  EXPECT_EQ(parse({"--stdin=all", "train.py"}).errors.size(), 1u);
}

TEST(Options, ModuleAndNoPython) {
  auto r = parse({"-m", "pkg.train", "--x"});
  ASSERT_TRUE(r.errors.empty());
  EXPECT_TRUE(r.options.module);
  EXPECT_EQ(r.options.program, "pkg.train");
  r = parse({"--no-python", "--", "-weird-name"});
  ASSERT_TRUE(r.errors.empty());
  EXPECT_TRUE(r.options.no_python);
  EXPECT_EQ(r.options.program, "-weird-name");
}

TEST(Options, MpirunStyle) {
  auto r = parse({"-np", "8", "-H", "a:2,b:2", "-x", "FOO=1", "-x", "BAR", "app"});
  ASSERT_TRUE(r.errors.empty());
  EXPECT_EQ(r.options.np, 8);
  EXPECT_EQ(r.options.hosts, "a:2,b:2");
  EXPECT_EQ(r.options.exports, (std::vector<std::string>{"FOO=1", "BAR"}));
}

TEST(Options, EveryErrorIsReportedAtOnce) {
  auto r = parse({"--nproc_per_node=0", "--nnodes=x", "--bogus", "--master_port=70000", "app"});
  ASSERT_EQ(r.errors.size(), 4u);
  EXPECT_EQ(r.errors[0].message,
            "--nproc_per_node=0: must be a positive integer (at most 4096, mlrun's limit) or one "
            "of auto, "
            "gpu, cpu");
  EXPECT_EQ(r.errors[1].message,
            "--nnodes=x: must be N or MIN:MAX with 1 <= MIN <= MAX <= 16384 (mlrun's limit)");
  EXPECT_EQ(r.errors[2].message, "unknown option '--bogus' (see mlrun --help)");
  EXPECT_NE(r.errors[3].message.find("--master_port=70000"), std::string::npos);
}

TEST(Options, MissingProgramAndMissingValue) {
  auto r = parse({"--nproc_per_node"});
  ASSERT_EQ(r.errors.size(), 2u);
  EXPECT_EQ(r.errors[0].message, "option '--nproc_per_node' needs a value");
  EXPECT_NE(r.errors[1].message.find("no program"), std::string::npos);
}

TEST(Options, ElasticRangeAndNodeRankBound) {
  auto r = parse({"--nnodes=2:4", "--node_rank=4", "app"});
  EXPECT_EQ(r.options.nnodes_min, 2);
  EXPECT_EQ(r.options.nnodes_max, 4);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].message.find("--node_rank=4"), std::string::npos);
}

TEST(Options, BadStreamSpec) {
  auto r = parse({"--redirects=7", "--tee=a:b", "app"});
  ASSERT_EQ(r.errors.size(), 2u);
}

// A fake environment for parse_options.
GetEnv env_of(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const std::string& name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

TEST(Options, PetVariablesFillWhatTheCommandLineLeavesOut) {
  // A PyTorchJob pod: everything in PET_*, the flag on the command line wins.
  auto r =
      parse_options({"--nproc_per_node=3", "train.py"}, env_of({{"PET_NNODES", "4"},
                                                                {"PET_NODE_RANK", "2"},
                                                                {"PET_NPROC_PER_NODE", "8"},
                                                                {"PET_MASTER_ADDR", "10.0.0.1"},
                                                                {"PET_MASTER_PORT", "23456"},
                                                                {"PET_MAX_RESTARTS", "2"},
                                                                {"PET_STANDALONE", "0"},
                                                                {"PET_NO_PYTHON", "1"}}));
  ASSERT_TRUE(r.errors.empty()) << r.errors[0].message;
  const Options& o = r.options;
  EXPECT_EQ(o.nproc_per_node, "3");
  EXPECT_EQ(o.nnodes_max, 4);
  EXPECT_EQ(o.node_rank, 2);
  EXPECT_EQ(o.master_addr, "10.0.0.1");
  EXPECT_EQ(o.master_port, 23456);
  EXPECT_EQ(o.max_restarts, 2);
  EXPECT_FALSE(o.standalone);
  EXPECT_TRUE(o.no_python);
  // Agents are told what came from the head's environment.
  EXPECT_EQ(o.node_args, (std::vector<std::string>{"--max_restarts", "2", "--no_python"}));
  auto source = [&](const std::string& option) {
    for (const auto& src : o.sources) {
      if (src.option == option) return src.origin;
    }
    return std::string("default");
  };
  EXPECT_EQ(source("--nnodes"), "PET_NNODES");
  EXPECT_EQ(source("--nproc_per_node"), "command line");
  EXPECT_EQ(source("--role"), "default");
}

TEST(Options, PetErrorsNameTheVariableAndRangesAreCheckedAfterIt) {
  auto r = parse_options({"app"}, env_of({{"PET_MASTER_PORT", "99999"},
                                          {"PET_STANDALONE", "yes"},
                                          {"PET_NNODES", "2"},
                                          {"PET_NODE_RANK", "2"}}));
  ASSERT_EQ(r.errors.size(), 3u);
  EXPECT_NE(r.errors[0].message.find("PET_STANDALONE=yes"), std::string::npos);
  EXPECT_NE(r.errors[1].message.find("(from PET_MASTER_PORT)"), std::string::npos);
  EXPECT_NE(r.errors[2].message.find("PET_NODE_RANK=2 must be less than PET_NNODES=2"),
            std::string::npos)
      << r.errors[2].message;
}

// A check of two options together names each as it was set: the flag, or the variable a
// Kubeflow pod set for torchrun, which its user never typed.
TEST(Options, CrossChecksNameWhereEachOptionCameFrom) {
  auto r = parse_options({"--nnodes=2", "app"}, env_of({{"PET_NODE_RANK", "5"}}));
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].message, "PET_NODE_RANK=5 must be less than --nnodes=2");
  r = parse_options({"--no-python", "app"}, env_of({{"PET_MODULE", "1"}}));
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].message,
            "PET_MODULE=1 runs a Python module and cannot be used with --no_python");
  EXPECT_EQ(as_given(r.options, "--max_restarts", "0"), "--max_restarts=0");  // not set
  EXPECT_EQ(origin_note(r.options, "--module"), " (from PET_MODULE)");
  EXPECT_EQ(origin_note(r.options, "--no_python"), "");
}

// torchrun takes a bare host for 29400 (its c10d port); a bad port is a usage error at once, not
// a failed connect after the launch has begun.
TEST(Options, RdzvEndpointTakesTorchrunsPortAndRefusesBadOnes) {
  EXPECT_EQ(parse_options({"--rdzv_endpoint=node0", "app"}).options.rdzv_endpoint, "node0:29400");
  EXPECT_EQ(parse_options({"--rdzv_endpoint=fe80::1", "app"}).options.rdzv_endpoint,
            "[fe80::1]:29400");
  EXPECT_EQ(parse_options({"--rdzv_endpoint=[::1]:5", "app"}).options.rdzv_endpoint, "[::1]:5");
  EXPECT_EQ(parse_options({"--rdzv_endpoint=h:29500", "app"}).options.rdzv_endpoint, "h:29500");
  EXPECT_TRUE(parse_options({"--rdzv_endpoint=", "app"}).errors.empty());  // none given
  // torchrun's --standalone endpoint: any free port.
  EXPECT_EQ(parse_options({"--rdzv_endpoint=localhost:0", "app"}).options.rdzv_endpoint,
            "localhost:0");
  for (const char* bad : {"h:x", "h:99999", "h:-1", "h:", ":29400", ":0"}) {
    auto r = parse_options({std::string("--rdzv_endpoint=") + bad, "app"});
    ASSERT_EQ(r.errors.size(), 1u) << bad;
    EXPECT_NE(r.errors[0].message.find("must be HOST:PORT"), std::string::npos) << bad;
  }
}

TEST(Options, ExportsNameAVariable) {
  EXPECT_TRUE(parse_options({"-x", "_A1=x=y", "-x", "B", "app"}).errors.empty());
  for (const char* bad : {"1BAD=1", "=1", "", "A-B=1", "A B"}) {
    auto r = parse_options({"-x", bad, "app"});
    ASSERT_EQ(r.errors.size(), 1u) << bad;
    EXPECT_NE(r.errors[0].message.find("VAR a variable's name"), std::string::npos) << bad;
  }
}

// `-H "$HOSTS"` with HOSTS unset must not quietly become a one-node job on this machine.
TEST(Options, AnEmptyHostListOrHostfileIsAnError) {
  for (auto args : {std::vector<std::string>{"-H", "", "app"}, {"--hosts=", "app"}}) {
    auto r = parse_options(args);
    ASSERT_EQ(r.errors.size(), 1u);
    EXPECT_EQ(r.errors[0].message, "-H: the host list is empty (an unset variable?)");
  }
  auto r = parse_options({"--hostfile", "", "app"});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].message, "--hostfile: the file name is empty (an unset variable?)");
}

TEST(ParseInt, WholeBaseTenWithinBounds) {
  int n = 7;
  EXPECT_TRUE(parse_integer("42", n));
  EXPECT_EQ(n, 42);
  EXPECT_TRUE(parse_integer("-3", n));
  EXPECT_EQ(n, -3);
  for (const char* bad : {"", " 1", "1 ", "+1", "4x", "0x10", "99999999999"}) {
    EXPECT_FALSE(parse_integer(bad, n)) << bad;
  }
  EXPECT_EQ(n, -3);  // Untouched by a failure.
  EXPECT_TRUE(parse_integer("65535", n, 0, 65535));
  EXPECT_FALSE(parse_integer("65536", n, 0, 65535));
  EXPECT_FALSE(parse_integer("-1", n, 0, 65535));
}

TEST(Options, SignalsToHandleFromFlagPetOrTorchelasticVariable) {
  EXPECT_EQ(parse_options({"app"}).options.signals_to_handle, "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  auto env = env_of({{"TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGUSR1"}});
  EXPECT_EQ(parse_options({"app"}, env).options.signals_to_handle, "SIGUSR1");
  EXPECT_EQ(parse_options({"--signals-to-handle=SIGUSR2", "app"}, env).options.signals_to_handle,
            "SIGUSR2");
  auto both =
      env_of({{"TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGUSR1"}, {"PET_SIGNALS_TO_HANDLE", "SIGTERM"}});
  EXPECT_EQ(parse_options({"app"}, both).options.signals_to_handle, "SIGTERM");
  // Without getenv (an agent), the environment is not read.
  EXPECT_EQ(parse_options({"app"}).options.sources.size(), 0u);
}

TEST(Options, ShutdownTimeoutIsTheGracePeriodInEverySpelling) {
  EXPECT_EQ(parse_options({"--shutdown-timeout=2.5", "app"}).options.grace_period, 2.5);
  auto env = env_of({{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}});
  EXPECT_EQ(parse_options({"app"}, env).options.grace_period, 7);
  EXPECT_EQ(parse_options({"--grace_period=1", "app"}, env).options.grace_period, 1);
  auto r = parse_options({"app"}, env_of({{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "soon"}}));
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].message.find("TORCH_ELASTIC_SHUTDOWN_TIMEOUT"), std::string::npos);
}

TEST(Options, TorchrunPluginOptionsAreAcceptedAndStayOnTheHead) {
  auto r = parse_options({"--logs-specs=mine", "--event-log-handler", "console", "app"},
                         env_of({{"PET_EVENT_LOG_HANDLER", "ignored"}}));
  ASSERT_TRUE(r.errors.empty()) << r.errors[0].message;
  EXPECT_EQ(r.options.logs_specs, "mine");
  EXPECT_EQ(r.options.event_log_handler, "console");
  EXPECT_TRUE(r.options.node_args.empty());
}

}  // namespace
}  // namespace mlrun
