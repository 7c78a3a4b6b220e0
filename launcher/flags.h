// One flag table type and one parser for every mlrun command line: `mlrun` (launcher/options.cc),
// `mlrun rdzv` (launcher/rdzv_command.cc), `mlrun doctor` and the sweep's ranks (doctor/). Each
// command lists its flags once, as a table; the parser and the --help text both read it.
//
// Every parser accepts the same forms: `--a_b` and `--a-b` are one flag (torchrun's rule),
// `--flag=value` and `--flag value`, short names as listed (-H, -np, -v). A command chooses only
// the wording of its errors and whether a word that is not a flag ends the flags (the program of
// `mlrun PROGRAM ARGS...`) or is an error.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace mlrun {

/// One flag of a command's table. apply writes what the flag sets into the command's options,
/// which it holds by reference (tables are built for one parse), and appends any error about the
/// value to the command's error list.
struct Flag {
  /// The first name is the flag's own: messages, --dry-run and the agents' argv use it. Long names
  /// match in either spelling; help prints them as written here.
  std::vector<std::string> names;
  /// The value's name in the help ("N", "FILE"); empty: the flag takes no value.
  std::string value;
  /// The help text; the usage wraps it to the help's width.
  std::string help;
  /// Called with the flag's name (FlagSyntax::apply_gets_written_name says which) and the value
  /// ("" for a flag without one).
  std::function<void(const std::string& flag, const std::string& value)> apply;
  /// Not in the help (a flag kept only to refuse it with a reason).
  bool hidden = false;
  /// A missing value is no error: apply gets "" (the refused `mlrun rdzv --token`).
  bool value_optional = false;
  /// The help's heading above this flag; empty: under the previous one.
  std::string group;

  bool takes_value() const { return !value.empty(); }
};

using FlagTable = std::vector<Flag>;

/// The tables one after the other: a command's table made of parts (its groups, or another
/// command's flags it also takes).
FlagTable concat(std::vector<FlagTable> parts);

/// How one command words its errors and where its flags end.
struct FlagSyntax {
  /// An argument that is no flag of the table, as written.
  std::function<std::string(const std::string& arg)> unknown;
  /// A flag that needs a value and has none; `written` is the flag as the user spelled it.
  std::function<std::string(const std::string& written, const Flag& flag)> needs_value;
  /// A flag without a value given one with '='.
  std::function<std::string(const std::string& written, const Flag& flag)> takes_no_value;
  /// True: the first word that does not start with '-' (or the word after "--") ends the flags,
  /// as `mlrun [options] PROGRAM [ARGS...]` needs. False: such a word is an unknown argument.
  bool operands_end_flags = false;
  /// The name apply is given: the flag's own (names.front()), or as the user wrote it (for
  /// messages that repeat the user's spelling).
  bool apply_gets_written_name = false;
};

/// "--nproc-per-node" -> "--nproc_per_node": the spelling flags are matched in.
std::string canonical_flag(std::string_view name);

/// The flag of the table with this name (either spelling); nullptr when there is none.
const Flag* find_flag(const FlagTable& table, std::string_view name);

/// Parses args against the table: applies each flag in order, appends each error to errors, and
/// calls on_flag (when given) after each flag applied. Returns the index of the first operand
/// (args.size() when there is none); with operands_end_flags, a "--" before it is skipped.
std::size_t parse_flags(const FlagTable& table, const std::vector<std::string>& args,
                        const FlagSyntax& syntax, std::vector<std::string>& errors,
                        const std::function<void(const Flag&, const std::string&)>& on_flag = {});

/// The option lines of a command's help: each group's heading, then per flag its names, the
/// value's name and the help, wrapped at 100 columns with the help in a column of its own.
std::string flags_usage(const FlagTable& table);

/// torchrun's comma list (--duplicate_stdout_filters): "a,b" is two strings, ",," a comma inside
/// one; "" is none.
std::vector<std::string> parse_comma_list(std::string_view text);

}  // namespace mlrun
