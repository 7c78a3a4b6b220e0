// Hostfiles and host lists in every common dialect, parsed into one list of hosts (docs/design.md
// §3, issue 4 item 3). The grammar, the dialect decisions and every error are in docs/hostfiles.md.
//
// Every function here is pure except read_hostfile, which reads one file. Nothing here resolves
// names, connects anywhere or exits: the launcher turns the result into a plan.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace mlrun {

/// Limits on what one hostfile or host list may ask for; each bounds memory or a count that
/// later becomes processes.
inline constexpr int kMaxSlotsPerHost = 1 << 16;             ///< slots, max_slots, and sums.
inline constexpr std::size_t kMaxRangeExpansion = 1 << 16;   ///< Hosts from one range pattern.
inline constexpr std::size_t kMaxHostfileBytes = 16u << 20;  ///< read_hostfile refuses more.
inline constexpr std::size_t kMaxHosts = 16384;              ///< Hosts in one file or list.

/// One host, after every line that lists it has been merged (duplicates add up their slots).
struct HostEntry {
  std::string host;           ///< A name, an IPv4 address, or an IPv6 address without brackets
                              ///< (canonical form, "%zone" kept). Never starts with '-'.
  std::string user;           ///< From user@host or username=; empty: SSH's default.
  int port = 0;               ///< From port=; 0: SSH's default.
  int slots = 1;              ///< Processes to run; 1 when the host is listed once, bare.
  int max_slots = 0;          ///< From max_slots=; 0: unset.
  bool slots_given = false;   ///< A count was written (slots=, :N, max_slots=) or the host was
                              ///< listed more than once; false lets --nproc_per_node decide.
  std::vector<int> slot_ids;  ///< Local slot indices to use (GPU indices for DeepSpeed's
                              ///< --include/--exclude), sorted; empty: 0..slots-1.
  std::string source;         ///< The file name, or "-H".
  int line = 0;               ///< First line that lists the host (1-based); 0 in a host list.

  bool operator==(const HostEntry&) const = default;
};

/// One user error: "file:line: what". line is 0 when the error concerns no one line.
/// The errors of one hostfile said at most; the rest are counted in one more line.
inline constexpr std::size_t kMaxHostfileErrors = 20;

struct HostfileError {
  std::string file;
  int line = 0;
  std::string message;  ///< Names the token, then why: "slots=abc: not a positive integer".

  bool operator==(const HostfileError&) const = default;
};

/// Hosts in the order they first appear, or errors (every one, in input order) and no hosts:
/// input with errors never yields a partial list.
struct HostList {
  std::vector<HostEntry> hosts;
  std::vector<HostfileError> errors;

  bool ok() const { return errors.empty(); }
};

/// "file:line: message", or "file: message" when line is 0.
std::string format_error(const HostfileError& error);

/// Parses a hostfile's text. Each line is auto-detected: Open MPI / DeepSpeed
/// ("[user@]host [slots=N] [max_slots=M] [username=U] [port=P]"), MPICH ("host:N"), one host per
/// line, Slurm ranges ("node[01-04,07]"), IPv6 ("fe80::1", "[fe80::1]:2"). '#' starts a comment.
/// A file that lists no host is an error.
HostList parse_hostfile(std::string_view text, std::string_view file_name);

/// Reads and parses a hostfile; a file that cannot be read is an error naming it and errno.
HostList read_hostfile(const std::string& path);

/// Parses -H / --hosts: comma-separated "[user@]host[:N]" items, where host may be a Slurm range
/// ("node[01-04,07]:4", whose commas are the range's) or a bracketed IPv6 address ("[fe80::1]:2").
/// Errors name the source "-H" and the item.
HostList parse_host_list(std::string_view spec);

/// Expands Slurm-style ranges: "node[01-04,07]" -> node01..node04, node07; several groups
/// ("r[1-2]n[1-2]") give their product, leftmost group slowest. Zero padding follows the width
/// of each lower bound ("[08-10]" -> 08, 09, 10). A pattern without '[' is returned as is.
/// On error returns nothing and sets *error to why ("04-01 runs backwards").
std::vector<std::string> expand_ranges(std::string_view pattern, std::string* error);

/// The key under which two spellings of one host are the same host: names compare without
/// case, IPv6 addresses by their canonical form.
std::string host_key(std::string_view host);

/// DeepSpeed's --include / --exclude: "NODE[@NODE...]", NODE = "host" (the whole host) or
/// "host:I,J,..." (local slot indices). host may be a range or a bracketed IPv6 address.
struct SlotFilter {
  struct Item {
    std::string host;        ///< One host, ranges already expanded.
    std::vector<int> slots;  ///< Empty: the whole host.
    bool operator==(const Item&) const = default;
  };
  std::vector<Item> items;
};

/// Parses a filter spec; each error is appended to *errors with file set to flag_name.
SlotFilter parse_slot_filter(std::string_view spec, std::string_view flag_name,
                             std::vector<HostfileError>* errors);

/// Applies --include or --exclude (at most one of them may be non-empty; both empty returns the
/// hosts unchanged) as DeepSpeed does: include keeps only the named hosts and slots, exclude
/// removes them; hosts keep their order, and a host left with no slot is dropped. A filtered
/// host gets slot_ids and slots = slot_ids.size(). Unknown hosts, slots out of range and a
/// result with no host are errors.
HostList apply_include_exclude(std::vector<HostEntry> hosts, std::string_view include,
                               std::string_view exclude);

}  // namespace mlrun
