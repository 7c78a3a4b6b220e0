#include "coordinator/records.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace mlrun::coordinator {
namespace {

using nlohmann::json;

// Parses text as a JSON object, or throws RecordError naming the record.
json parse_object(const std::string& text, const char* what) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    throw RecordError(fmt::format("{} record is not JSON: '{}'", what, text.substr(0, 80)));
  }
  if (!j.is_object()) {
    throw RecordError(
        fmt::format("{} record is not a JSON object: '{}'", what, text.substr(0, 80)));
  }
  return j;
}

// Reads field `name` of a record: a missing required field or a field of the wrong type is a
// RecordError; a missing optional one keeps out's value.
template <typename T>
void field(const json& j, const char* name, T& out, const char* what, bool required) {
  auto it = j.find(name);
  if (it == j.end()) {
    if (required) throw RecordError(fmt::format("{} record has no \"{}\"", what, name));
    return;
  }
  try {
    out = it->get<T>();
  } catch (const json::exception&) {
    throw RecordError(
        fmt::format("{} record's \"{}\" is of the wrong type: {}", what, name, it->dump()));
  }
}

}  // namespace

std::string FailureRecord::encode() const {
  json j = {{"node", node}, {"host", host},     {"rank", rank}, {"local_rank", local_rank},
            {"pid", pid},   {"status", status}, {"code", code}, {"time", time},
            {"tail", tail}};
  if (!error.empty()) j["error"] = error;
  return j.dump();
}

FailureRecord FailureRecord::decode(const std::string& text) {
  static constexpr const char* kWhat = "the failure";
  json j = parse_object(text, kWhat);
  FailureRecord r;
  field(j, "code", r.code, kWhat, true);
  field(j, "node", r.node, kWhat, false);
  field(j, "host", r.host, kWhat, false);
  field(j, "rank", r.rank, kWhat, false);
  field(j, "local_rank", r.local_rank, kWhat, false);
  field(j, "pid", r.pid, kWhat, false);
  field(j, "status", r.status, kWhat, false);
  field(j, "time", r.time, kWhat, false);
  field(j, "tail", r.tail, kWhat, false);
  field(j, "error", r.error, kWhat, false);
  return r;
}

int failure_code(const std::string& text) {
  try {
    return FailureRecord::decode(text).code;
  } catch (const RecordError&) {
    return 1;
  }
}

std::string NodeResult::encode() const {
  json j = {{"ok", ok}, {"code", code}};
  if (lost) j["lost"] = true;
  return j.dump();
}

NodeResult NodeResult::decode(const std::string& text) {
  static constexpr const char* kWhat = "a node's result";
  json j = parse_object(text, kWhat);
  NodeResult r;
  field(j, "lost", r.lost, kWhat, false);
  field(j, "ok", r.ok, kWhat, true);
  field(j, "code", r.code, kWhat, true);
  return r;
}

std::string MembershipChange::encode() const {
  json lost_nodes = json::array();
  for (const auto& l : lost) {
    lost_nodes.push_back({{"node", l.node},
                          {"member", l.member},
                          {"last_heard", l.last_heard},
                          {"silent_s", l.silent_s},
                          {"why", l.why}});
  }
  return json{{"round", round}, {"alive", alive},   {"min", min},
              {"max", max},     {"joined", joined}, {"lost", lost_nodes}}
      .dump();
}

MembershipChange MembershipChange::decode(const std::string& text) {
  static constexpr const char* kWhat = "the membership change";
  json j = parse_object(text, kWhat);
  MembershipChange c;
  field(j, "round", c.round, kWhat, false);
  field(j, "alive", c.alive, kWhat, false);
  field(j, "min", c.min, kWhat, false);
  field(j, "max", c.max, kWhat, false);
  field(j, "joined", c.joined, kWhat, false);
  json lost = json::array();
  field(j, "lost", lost, kWhat, false);
  if (!lost.is_array()) throw RecordError("the membership change record's \"lost\" is no list");
  for (const auto& l : lost) {
    if (!l.is_object()) {
      throw RecordError(
          fmt::format("the membership change record's lost node is no object: {}", l.dump()));
    }
    static constexpr const char* kLost = "the membership change's lost node";
    LostNode n;
    field(l, "node", n.node, kLost, false);
    field(l, "member", n.member, kLost, false);
    field(l, "why", n.why, kLost, false);
    field(l, "last_heard", n.last_heard, kLost, false);
    field(l, "silent_s", n.silent_s, kLost, false);
    c.lost.push_back(std::move(n));
  }
  return c;
}

std::string MembershipChange::describe_lost() const {
  std::string out;
  for (const auto& l : lost) {
    out += fmt::format("{}node {} ({}) lost: {}; last heard from at {} ({:.1f} s ago)",
                       out.empty() ? "" : "; ", l.node, l.member.empty() ? "?" : l.member,
                       l.why.empty() ? "?" : l.why, l.last_heard.empty() ? "?" : l.last_heard,
                       l.silent_s);
  }
  return out;
}

std::string MembershipChange::describe() const {
  std::string out = describe_lost();
  for (const auto& j : joined) {
    out += fmt::format("{}{} is waiting to join", out.empty() ? "" : "; ", j);
  }
  return out;
}

}  // namespace mlrun::coordinator
