#include "launcher/flags.h"

#include <iterator>

#include <fmt/format.h>

namespace mlrun {
namespace {

constexpr std::size_t kHelpWidth = 100;  // Columns of the help text.
constexpr std::size_t kHelpColumn = 35;  // Where a flag's help starts.

// "-b" and "--minbytes=8" -> the name part, as written.
std::string written_name(const std::string& arg) {
  return arg.substr(0, arg.find('='));
}

// The names as the help shows them: short ones (one dash) first, as `-r, --redirects`.
std::string shown_names(const Flag& f) {
  std::vector<std::string> shown;
  for (const auto& n : f.names) {
    if (n.rfind("--", 0) != 0) shown.push_back(n);
  }
  for (const auto& n : f.names) {
    if (n.rfind("--", 0) == 0) shown.push_back(n);
  }
  std::string out = fmt::format("{}", fmt::join(shown, ", "));
  if (f.takes_value()) out += " " + f.value;
  return out;
}

// Appends text to out, wrapped at kHelpWidth; the first line continues `used` columns already
// written, the others start at kHelpColumn. A '\n' in text starts a new line.
void wrap(std::string& out, std::string_view text, std::size_t used) {
  std::size_t column = used;
  bool line_empty = true;
  auto new_line = [&] {
    out += "\n" + std::string(kHelpColumn, ' ');
    column = kHelpColumn;
    line_empty = true;
  };
  while (!text.empty()) {
    if (text.front() == '\n') {
      new_line();
      text.remove_prefix(1);
      continue;
    }
    auto end = text.find_first_of(" \n");
    std::string_view word = text.substr(0, end);
    if (!line_empty && column + 1 + word.size() > kHelpWidth) new_line();
    if (!line_empty) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
    line_empty = false;
    text.remove_prefix(end == std::string_view::npos ? text.size() : end);
    if (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  }
  out += '\n';
}

// The value of args[i] when the flag takes one: after '=', else the next word (advancing i).
// False, with the error recorded, when there is none.
bool take_value(const Flag& flag, const std::vector<std::string>& args, std::size_t& i,
                const FlagSyntax& syntax, std::vector<std::string>& errors, std::string& value) {
  const std::string& arg = args[i];
  if (auto eq = arg.find('='); eq != std::string::npos) {
    value = arg.substr(eq + 1);
    return true;
  }
  if (i + 1 < args.size()) {
    value = args[++i];
    return true;
  }
  if (flag.value_optional) return true;
  errors.push_back(syntax.needs_value(written_name(arg), flag));
  return false;
}

}  // namespace

std::string canonical_flag(std::string_view name) {
  std::string out(name);
  if (out.rfind("--", 0) == 0) {
    for (std::size_t i = 2; i < out.size(); ++i) {
      if (out[i] == '-') out[i] = '_';
    }
  }
  return out;
}

FlagTable concat(std::vector<FlagTable> parts) {
  FlagTable table;
  for (auto& part : parts) {
    table.insert(table.end(), std::make_move_iterator(part.begin()),
                 std::make_move_iterator(part.end()));
  }
  return table;
}

const Flag* find_flag(const FlagTable& table, std::string_view name) {
  const std::string wanted = canonical_flag(name);
  for (const auto& flag : table) {
    for (const auto& n : flag.names) {
      if (canonical_flag(n) == wanted) return &flag;
    }
  }
  return nullptr;
}

std::size_t parse_flags(const FlagTable& table, const std::vector<std::string>& args,
                        const FlagSyntax& syntax, std::vector<std::string>& errors,
                        const std::function<void(const Flag&, const std::string&)>& on_flag) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (syntax.operands_end_flags) {
      if (arg == "--") return i + 1;
      if (arg.size() < 2 || arg[0] != '-') return i;  // The program.
    }
    const Flag* flag =
        arg.size() >= 2 && arg[0] == '-' ? find_flag(table, written_name(arg)) : nullptr;
    // A short flag with its value attached, as argparse takes it: -r3, -t1.
    if (flag == nullptr && arg.size() > 2 && arg[1] != '-' && arg.find('=') == std::string::npos) {
      const Flag* short_flag = find_flag(table, arg.substr(0, 2));
      if (short_flag != nullptr && short_flag->takes_value()) {
        short_flag->apply(
            syntax.apply_gets_written_name ? arg.substr(0, 2) : short_flag->names.front(),
            arg.substr(2));
        if (on_flag) on_flag(*short_flag, arg.substr(2));
        continue;
      }
    }
    if (flag == nullptr) {
      errors.push_back(syntax.unknown(arg));
      continue;
    }
    std::string value;
    if (flag->takes_value()) {
      if (!take_value(*flag, args, i, syntax, errors, value)) continue;
    } else if (arg.find('=') != std::string::npos) {
      errors.push_back(syntax.takes_no_value(written_name(arg), *flag));
      continue;
    }
    flag->apply(syntax.apply_gets_written_name ? written_name(arg) : flag->names.front(), value);
    if (on_flag) on_flag(*flag, value);
  }
  return args.size();
}

std::string flags_usage(const FlagTable& table) {
  std::string out;
  for (const auto& flag : table) {
    if (!flag.group.empty()) out += (out.empty() ? "" : "\n") + flag.group + "\n";
    if (flag.hidden) continue;
    std::string left = "  " + shown_names(flag);
    out += left;
    if (left.size() + 2 <= kHelpColumn) {
      out += std::string(kHelpColumn - left.size(), ' ');
      wrap(out, flag.help, kHelpColumn);
    } else {
      out += "\n" + std::string(kHelpColumn, ' ');
      wrap(out, flag.help, kHelpColumn);
    }
  }
  return out;
}

std::vector<std::string> parse_comma_list(std::string_view text) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  std::string item;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != ',') {
      item += text[i];
    } else if (i + 1 < text.size() && text[i + 1] == ',') {
      item += ',';
      ++i;
    } else {
      out.push_back(std::move(item));
      item.clear();
    }
  }
  out.push_back(std::move(item));
  return out;
}

}  // namespace mlrun
