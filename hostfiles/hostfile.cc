// Hostfiles and -H host lists: each line or item becomes hosts with counts, then every mention
// of one host is merged into one entry.
#include "hostfiles/hostfile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "hostfiles/host_syntax.h"

namespace mlrun {
namespace {

using namespace hostfiles_detail;

constexpr std::string_view kHostListSource = "-H";

// What one line (or one -H item) says, before merging.
struct Mention {
  std::vector<std::string> hosts;
  std::string user;
  int port = 0;
  int slots = 0;  // 0: not written.
  int max_slots = 0;
};

// A message quotes the file's own bytes: a control byte (an escape sequence in a file, or a
// binary one) is written \xNN, so no hostfile can move the cursor or fake a line of output.
std::string terminal_safe(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      out += fmt::format("\\x{:02x}", byte);
    } else {
      out += c;
    }
  }
  return out;
}

class Errors {
 public:
  Errors(std::string_view file, std::vector<HostfileError>* out) : file_(file), out_(out) {}
  void at(int line, std::string message) {
    out_->push_back({std::string(file_), line, terminal_safe(message)});
  }
  std::string_view file() const { return file_; }

 private:
  std::string_view file_;
  std::vector<HostfileError>* out_;
};

bool check_user(std::string_view user, std::string* why) {
  if (user.empty()) {
    *why = "empty user before '@'";
    return false;
  }
  for (char c : user) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      *why = fmt::format("'{}' is not allowed in a user name", c);
      return false;
    }
  }
  if (user.front() == '-') {
    *why = "a user name cannot start with '-'";
    return false;
  }
  return true;
}

// Parses "[user@]host[:N]" (N a slot count) into *m; reports under `line`.
bool parse_host_token(std::string_view token, Mention* m, Errors& errors, int line,
                      std::string_view label) {
  std::string why;
  std::string_view rest = token;
  if (auto at = token.find('@'); at != std::string_view::npos) {
    std::string_view user = token.substr(0, at);
    rest = token.substr(at + 1);
    if (rest.find('@') != std::string_view::npos) {
      errors.at(line, fmt::format("{}: more than one '@'", label));
      return false;
    }
    if (!check_user(user, &why)) {
      errors.at(line, fmt::format("{}: {}", label, why));
      return false;
    }
    m->user = user;
  }
  HostAndSuffix split;
  if (!split_host_suffix(rest, &split, &why) ||
      !expand_hosts(split.host, split.ipv6, &m->hosts, &why)) {
    errors.at(line, fmt::format("{}: {}", label, why));
    return false;
  }
  if (split.suffix && !parse_count(*split.suffix, 1, &m->slots, &why)) {
    errors.at(line, fmt::format("{}: slot count '{}': {}", label, *split.suffix, why));
    return false;
  }
  return true;
}

enum class Key { kSlots, kMaxSlots, kUser, kPort };

std::optional<Key> find_key(std::string_view name) {
  static const std::map<std::string_view, Key> keys = {
      {"slots", Key::kSlots},        {"max_slots", Key::kMaxSlots}, {"max-slots", Key::kMaxSlots},
      {"slots_max", Key::kMaxSlots}, {"slots-max", Key::kMaxSlots}, {"username", Key::kUser},
      {"user_name", Key::kUser},     {"user-name", Key::kUser},     {"port", Key::kPort},
  };
  auto it = keys.find(name);
  if (it == keys.end()) return std::nullopt;
  return it->second;
}

// Splits a line into words, with "key = value" and "key= value" joined into "key=value" as Open
// MPI's lexer allows.
std::vector<std::string> words_of(std::string_view line) {
  std::vector<std::string> words;
  bool join_next = false;
  std::size_t i = 0;
  while (i < line.size()) {
    if (std::isspace(static_cast<unsigned char>(line[i]))) {
      ++i;
      continue;
    }
    auto end = i;
    while (end < line.size() && !std::isspace(static_cast<unsigned char>(line[end]))) ++end;
    std::string word(line.substr(i, end - i));
    i = end;
    bool joins_previous = !words.empty() && (join_next || word.front() == '=') &&
                          words.size() > 1;  // Never glue onto the host itself.
    if (joins_previous) {
      words.back() += word;
    } else {
      words.push_back(std::move(word));
    }
    join_next = words.back().back() == '=';
  }
  return words;
}

// A word after the host with no '=': an error; true when it also took the next word (a key and
// its value written apart).
bool bare_word(const std::vector<std::string>& words, std::size_t i, int line, Errors& errors) {
  const std::string& word = words[i];
  if (find_key(word) && i + 1 < words.size()) {
    errors.at(line, fmt::format("{} {}: write {}={}", word, words[i + 1], word, words[i + 1]));
    return true;
  }
  if (find_key(word)) {
    errors.at(line, fmt::format("{}: missing '=' and value", word));
  } else {
    errors.at(line, fmt::format("{}: unexpected text after the host; expected key=value", word));
  }
  return false;
}

// slots= or max_slots=: a count, once on the line (*count > 0: given already).
bool set_count(const std::string& word, std::string_view what, std::string_view value, int* count,
               int line, Errors& errors) {
  std::string why;
  if (*count > 0) {
    errors.at(line, fmt::format("{}: {} given twice on this line", word, what));
    return false;
  }
  if (!parse_count(value, 1, count, &why)) {
    errors.at(line, fmt::format("{}: {}", word, why));
    return false;
  }
  return true;
}

bool set_user(const std::string& word, std::string_view value, Mention* m,
              std::optional<std::string>& keyed_user, int line, Errors& errors) {
  std::string why;
  if (!check_user(value, &why)) {
    errors.at(line, fmt::format("{}: {}", word, value.empty() ? "empty user" : why));
    return false;
  }
  if (keyed_user || (!m->user.empty() && m->user != value)) {
    errors.at(line, fmt::format("{}: user given twice on this line", word));
    return false;
  }
  keyed_user = std::string(value);
  m->user = value;
  return true;
}

bool set_port(const std::string& word, std::string_view value, Mention* m, int line,
              Errors& errors) {
  std::string why;
  int port = 0;
  if (!parse_count(value, 1, &port, &why) || port > 65535) {
    errors.at(line, fmt::format("{}: not a port number (1-65535)", word));
    return false;
  }
  if (m->port > 0) {
    errors.at(line, fmt::format("{}: port given twice on this line", word));
    return false;
  }
  m->port = port;
  return true;
}

// One key=value word after the host; false (with its error) when it is bad.
bool apply_key(const std::string& word, std::size_t eq, Mention* m,
               std::optional<std::string>& keyed_user, int line, Errors& errors) {
  std::string_view name = std::string_view(word).substr(0, eq);
  std::string_view value = std::string_view(word).substr(eq + 1);
  auto key = find_key(name);
  if (name.empty()) {
    errors.at(line, fmt::format("{}: missing key before '='", word));
    return false;
  }
  if (!key) {
    errors.at(line, fmt::format("{}: unknown key '{}' (known: slots, max_slots, username, port)",
                                word, name));
    return false;
  }
  switch (*key) {
    case Key::kSlots:  // From slots= earlier or host:N.
      return set_count(word, "slots", value, &m->slots, line, errors);
    case Key::kMaxSlots:
      return set_count(word, "max_slots", value, &m->max_slots, line, errors);
    case Key::kUser:
      return set_user(word, value, m, keyed_user, line, errors);
    case Key::kPort:
      return set_port(word, value, m, line, errors);
  }
  return true;
}

// One hostfile line, comment and whitespace already gone; true when it named hosts.
bool parse_line(std::string_view text, int line, Mention* m, Errors& errors) {
  auto words = words_of(text);
  const std::string& first = words.front();
  bool ok = true;
  if (first.find('=') != std::string::npos) {
    errors.at(line, fmt::format("{}: a line starts with a host, not key=value", first));
    return false;
  }
  if (first.front() == '^' || first.front() == '+') {
    errors.at(line, fmt::format("{}: Open MPI's {} lines are not supported{}", first,
                                first.front() == '^' ? "exclusion" : "relative-node",
                                first.front() == '^' ? "; use --exclude" : ""));
    ok = false;
  } else if (!parse_host_token(first, m, errors, line, first)) {
    ok = false;
  }
  std::optional<std::string> keyed_user;
  for (std::size_t i = 1; i < words.size(); ++i) {
    auto eq = words[i].find('=');
    if (eq == std::string::npos) {
      if (bare_word(words, i, line, errors)) ++i;
      ok = false;
    } else if (!apply_key(words[i], eq, m, keyed_user, line, errors)) {
      ok = false;
    }
  }
  if (m->max_slots > 0 && m->slots > m->max_slots) {
    errors.at(line, fmt::format("max_slots={}: less than slots={}", m->max_slots, m->slots));
    ok = false;
  }
  return ok;
}

// Merges every mention of one host into one entry, the way Open MPI merges duplicates: slots
// add up; user, port and max_slots must agree.
class Merger {
 public:
  Merger(std::string_view source, Errors& errors) : source_(source), errors_(errors) {}

  void add(const Mention& m, int line) {
    for (const auto& host : m.hosts) add_one(host, m, line);
  }

  // The merged hosts, in first-mention order; checks what only the sum can show.
  std::vector<HostEntry> finish() {
    for (auto& entry : hosts_) {
      if (conflicted_.count(host_key(entry.host))) continue;  // Already reported.
      if (entry.max_slots > 0 && entry.slots > entry.max_slots) {
        errors_.at(entry.line, fmt::format("{}: {} slots over all its lines exceed max_slots={}",
                                           entry.host, entry.slots, entry.max_slots));
      }
    }
    return std::move(hosts_);
  }

 private:
  std::string where(int line) const {
    return line > 0 ? fmt::format("line {}", line) : std::string("an earlier item");
  }

  void add_one(const std::string& host, const Mention& m, int line) {
    int slots = m.slots > 0 ? m.slots : (m.max_slots > 0 ? m.max_slots : 1);
    auto [it, fresh] = index_.try_emplace(host_key(host), hosts_.size());
    if (fresh) {
      HostEntry entry;
      entry.host = host;
      entry.user = m.user;
      entry.port = m.port;
      entry.slots = slots;
      entry.max_slots = m.max_slots;
      entry.slots_given = m.slots > 0 || m.max_slots > 0;
      entry.source = std::string(source_);
      entry.line = line;
      hosts_.push_back(std::move(entry));
      return;
    }
    HostEntry& entry = hosts_[it->second];
    if (!m.user.empty() && !entry.user.empty() && m.user != entry.user) {
      errors_.at(line, fmt::format("{}: user '{}' here, '{}' on {}", host, m.user, entry.user,
                                   where(entry.line)));
    }
    if (m.port > 0 && entry.port > 0 && m.port != entry.port) {
      errors_.at(line, fmt::format("{}: port {} here, {} on {}", host, m.port, entry.port,
                                   where(entry.line)));
    }
    if (m.max_slots > 0 && entry.max_slots > 0 && m.max_slots != entry.max_slots) {
      errors_.at(line, fmt::format("{}: max_slots={} here, max_slots={} on {}", host, m.max_slots,
                                   entry.max_slots, where(entry.line)));
      conflicted_.insert(it->first);
    }
    if (entry.user.empty()) entry.user = m.user;
    if (entry.port == 0) entry.port = m.port;
    if (entry.max_slots == 0) entry.max_slots = m.max_slots;
    entry.slots_given = true;
    if (entry.slots + slots > kMaxSlotsPerHost) {
      errors_.at(line,
                 fmt::format("{}: more than {} slots over all its lines", host, kMaxSlotsPerHost));
    } else {
      entry.slots += slots;
    }
  }

  std::string_view source_;
  Errors& errors_;
  std::vector<HostEntry> hosts_;
  std::map<std::string, std::size_t> index_;
  std::set<std::string> conflicted_;  // Keys whose max_slots disagree: one error is enough.
};

HostList finish(Merger& merger, std::vector<HostfileError>* errors, std::string_view source) {
  HostList list;
  list.hosts = merger.finish();
  list.errors = std::move(*errors);
  if (list.hosts.size() > kMaxHosts) {
    list.errors.push_back({std::string(source), 0,
                           fmt::format("{} hosts: more than the limit of {} (kMaxHosts)",
                                       list.hosts.size(), kMaxHosts)});
  }
  // Merge errors are found after the lines they concern; keep the report in file order.
  std::stable_sort(list.errors.begin(), list.errors.end(),
                   [](const HostfileError& a, const HostfileError& b) { return a.line < b.line; });
  if (!list.errors.empty()) list.hosts.clear();
  // A binary file given by mistake has an error on every "line": the first ones say enough.
  if (list.errors.size() > kMaxHostfileErrors) {
    std::size_t more = list.errors.size() - kMaxHostfileErrors;
    list.errors.resize(kMaxHostfileErrors);
    list.errors.push_back(
        {std::string(source), 0,
         fmt::format("{} more error{} not shown (is it a hostfile?)", more, more == 1 ? "" : "s")});
  }
  return list;
}

}  // namespace

std::string format_error(const HostfileError& error) {
  if (error.line > 0) return fmt::format("{}:{}: {}", error.file, error.line, error.message);
  return fmt::format("{}: {}", error.file, error.message);
}

std::string host_key(std::string_view host) {
  std::string key(host), unused;
  if (key.find(':') != std::string::npos) canonical_ipv6(host, &key, &unused);
  for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return key;
}

HostList parse_hostfile(std::string_view text, std::string_view file_name) {
  std::vector<HostfileError> error_list;
  Errors errors(file_name, &error_list);
  Merger merger(file_name, errors);
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // A UTF-8 byte-order mark.
  int line_number = 0;
  bool any_line = false;
  while (!text.empty()) {
    ++line_number;
    auto newline = text.find('\n');
    std::string_view line = text.substr(0, newline);
    text.remove_prefix(newline == std::string_view::npos ? text.size() : newline + 1);
    line = line.substr(0, line.find('#'));
    auto begin = line.find_first_not_of(" \t\r\f\v");
    if (begin == std::string_view::npos) continue;
    line = line.substr(begin, line.find_last_not_of(" \t\r\f\v") - begin + 1);
    any_line = true;
    Mention mention;
    if (parse_line(line, line_number, &mention, errors)) merger.add(mention, line_number);
  }
  if (!any_line) errors.at(0, "no hosts: the file has only blank lines and comments");
  return finish(merger, &error_list, file_name);
}

HostList read_hostfile(const std::string& path) {
  HostList failed;
  auto fail = [&](std::string message) {
    failed.errors.push_back({path, 0, std::move(message)});
    return failed;
  };
  // Non-blocking open, then a check of what it is: a FIFO (or a device) would block the launch
  // forever or never end; only a regular file is read.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return fail(fmt::format("cannot read: {}", std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) return fail(fmt::format("cannot read: {}", std::strerror(errno)));
  if (S_ISDIR(st.st_mode)) return fail("cannot read: is a directory");
  if (!S_ISREG(st.st_mode)) return fail("not a regular file (a FIFO, socket or device)");
  if (static_cast<std::uintmax_t>(st.st_size) > kMaxHostfileBytes) {
    return fail(fmt::format("larger than the limit of {} bytes", kMaxHostfileBytes));
  }
  std::string text;
  char buffer[65536];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(fmt::format("read failed: {}", std::strerror(errno)));
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
    if (text.size() > kMaxHostfileBytes) {
      return fail(fmt::format("larger than the limit of {} bytes", kMaxHostfileBytes));
    }
  }
  return parse_hostfile(text, path);
}

HostList parse_host_list(std::string_view spec) {
  std::vector<HostfileError> error_list;
  Errors errors(kHostListSource, &error_list);
  Merger merger(kHostListSource, errors);
  auto trimmed = spec.find_first_not_of(" \t");
  if (trimmed == std::string_view::npos) {
    errors.at(0, "empty host list");
    return finish(merger, &error_list, kHostListSource);
  }
  int index = 0;
  for (std::string_view item : split_outside_brackets(spec, ',')) {
    ++index;
    auto begin = item.find_first_not_of(" \t");
    if (begin == std::string_view::npos) {
      errors.at(0, fmt::format("item {}: empty host (a stray ',')", index));
      continue;
    }
    item = item.substr(begin, item.find_last_not_of(" \t") - begin + 1);
    Mention mention;
    std::string label = fmt::format("'{}'", item);
    if (parse_host_token(item, &mention, errors, 0, label)) merger.add(mention, 0);
  }
  return finish(merger, &error_list, kHostListSource);
}

}  // namespace mlrun
