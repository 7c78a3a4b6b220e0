// The report's two forms: text for a terminal and the --json object, and a remote host's JSON
// section read back into a HostReport. Pure: no probes, no I/O.
#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "doctor/doctor.h"
#include "worker/network.h"

namespace mlrun::doctor {
namespace {

// A JSON string, or null for an empty one.
nlohmann::json or_null(const std::string& s) {
  return s.empty() ? nlohmann::json() : nlohmann::json(s);
}

nlohmann::json component_json(const Component& c) {
  nlohmann::json j = {{"found", c.found}, {"checked", c.checked}, {"how", c.how}};
  j["version"] = or_null(c.version);
  j["path"] = or_null(c.path);
  j["note"] = or_null(c.note);
  return j;
}

std::string component_text(const Component& c) {
  std::string s;
  if (!c.checked) {
    s = c.note;
  } else if (c.found) {
    s = c.version.empty() ? "found" : c.version;
    if (!c.path.empty()) s += fmt::format(" ({})", c.path);
  } else {
    s = "not found";
  }
  if (c.checked && !c.note.empty()) s += fmt::format("; {}", c.note);
  s += fmt::format("  [{}]", c.how);
  return s;
}

std::string gpu_text(const GpuReport& g) {
  std::string s =
      fmt::format("{} NVIDIA GPU{} (/dev/nvidiaN)", g.device_files, g.device_files == 1 ? "" : "s");
  if (g.cuda_visible_devices) {
    s += fmt::format(", {} visible to workers (CUDA_VISIBLE_DEVICES={})", g.visible,
                     *g.cuda_visible_devices);
    if (g.visible > g.device_files) {
      s += "; CUDA_VISIBLE_DEVICES names more GPUs than this host has device files for";
    }
  }
  for (std::size_t i = 0; i < g.models.size(); ++i) {
    s += fmt::format("\n    {}: {}", i, g.models[i]);
  }
  return s;
}

std::string host_text(const HostReport& h) {
  std::string s;
  if (h.local) {
    s += fmt::format("host {} (this host)\n", h.host);
  } else {
    s += fmt::format("host {} ({}{})\n", h.host, h.via_srun ? "through srun" : "over SSH",
                     h.address.empty() ? "" : fmt::format("; this host is {} to it", h.address));
    if (!h.reachable) {
      s += fmt::format("  SSH         unreachable: {}\n", h.ssh_error);
      return s;
    }
    if (!h.via_srun) s += "  SSH         ok\n";
    if (h.probe_timed_out) {
      s += fmt::format("  Probe       {}\n", h.probe_error);
    } else if (!h.probe_error.empty()) {
      s += fmt::format("  Probe       failed: {}\n", h.probe_error);
    }
  }
  if (h.rendezvous_port) {
    const PortCheck& c = *h.rendezvous_port;
    if (c.ok) {
      s += fmt::format("  Rendezvous  reaches {} (TCP connect in {} ms)\n", c.target, c.elapsed_ms);
    } else {
      s += fmt::format("  Rendezvous  cannot reach {}: {}\n", c.target, c.error);
    }
  }
  if (!h.probe_error.empty()) return s;
  if (!h.hostname.empty()) s += fmt::format("  Hostname    {}\n", h.hostname);
  s += fmt::format("  GPUs        {}\n", gpu_text(h.gpus));
  s += fmt::format("  NCCL        {}\n", component_text(h.nccl));
  s += fmt::format("  Gloo        {}\n", component_text(h.gloo));
  s += fmt::format("  Open MPI    {}\n", component_text(h.mpi));
  s += fmt::format("  PyTorch     {}\n", component_text(h.torch));
  if (!h.numa.empty()) s += fmt::format("  NUMA        {}\n", h.numa);
  if (!h.teardown.empty()) s += fmt::format("  Teardown    {}\n", h.teardown);
  s += fmt::format("  InfiniBand  {}\n", h.infiniband ? "a device exists (/sys/class/infiniband)"
                                                      : "none (/sys/class/infiniband)");
  s += "  Interfaces\n";
  std::size_t width = 4;
  for (const auto& i : h.interfaces) width = std::max(width, i.name.size());
  for (const auto& i : h.interfaces) {
    std::vector<std::string> addrs;
    for (const auto& a : i.addresses) addrs.push_back(a.text);
    s += fmt::format("    {:<{}}  {:<10}  {:<4}  {:<13}  {}\n", i.name, width, interface_kind(i),
                     i.up ? "up" : "down", speed_text(i.speed_mbps),
                     addrs.empty() ? "no address" : fmt::format("{}", fmt::join(addrs, " ")));
  }
  s += fmt::format("  Backend     {}: {}\n", h.backend.name, h.backend.reason);
  for (const auto& e : h.errors) s += fmt::format("  Error       {}\n", e);
  if (h.errors.empty()) {
    s += fmt::format("  Interface   {}{}\n", h.iface.reason,
                     h.master_addr.empty() ? " (no --master_addr given)" : "");
  }
  if (!h.iface.warning.empty()) s += fmt::format("  Warning     {}\n", h.iface.warning);
  s += "  Variables   what every worker gets (a value already in your environment wins):\n";
  for (const auto& v : h.variables) {
    if (v.user_value && v.is_default) {
      s += fmt::format("    {}={}  (yours; mlrun's default would be {})\n", v.name, *v.user_value,
                       v.value);
    } else {
      s += fmt::format("    {}={}\n", v.name, v.value);
    }
  }
  return s;
}

Component component_from(const nlohmann::json& j) {
  Component c;
  auto text = [&j](const char* key) {
    return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
  };
  c.found = j.at("found").get<bool>();
  c.checked = j.at("checked").get<bool>();
  c.how = text("how");
  c.version = text("version");
  c.path = text("path");
  c.note = text("note");
  return c;
}

std::string string_or_empty(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

}  // namespace

std::vector<std::string> host_problems(const HostReport& h) {
  std::vector<std::string> p;
  if (!h.reachable) {
    p.push_back(fmt::format("{} is unreachable over SSH: {}", h.host, h.ssh_error));
    return p;
  }
  if (h.rendezvous_port && !h.rendezvous_port->ok) {
    p.push_back(fmt::format("{} cannot reach {}: {}", h.host, h.rendezvous_port->target,
                            h.rendezvous_port->error));
  }
  if (h.probe_timed_out) {
    p.push_back(fmt::format("{}: {}", h.host, h.probe_error));
  } else if (!h.probe_error.empty()) {
    p.push_back(fmt::format("{}: probe failed: {}", h.host, h.probe_error));
  }
  for (const auto& e : h.errors) p.push_back(fmt::format("{}: {}", h.host, e));
  return p;
}

std::string format_doctor_text(const DoctorReport& report) {
  std::string s;
  std::vector<std::string> problems;
  for (const auto& h : report.hosts) {
    s += host_text(h);
    for (auto& p : host_problems(h)) problems.push_back(std::move(p));
  }
  if (!report.remote_hosts.empty()) {
    s += fmt::format("remote checks ({}): {}\n", report.remote_hosts, report.remote_status);
  } else {
    s += fmt::format("remote checks: {}\n", report.remote_status);
  }
  if (problems.empty()) {
    s += "no problems found\n";
  } else {
    s += fmt::format("{} problem{}:\n", problems.size(), problems.size() == 1 ? "" : "s");
    for (const auto& p : problems) s += fmt::format("  {}\n", p);
  }
  return s;
}

nlohmann::json host_json(const HostReport& h) {
  nlohmann::json port;
  if (h.rendezvous_port) {
    const PortCheck& c = *h.rendezvous_port;
    port = {{"target", c.target},
            {"ok", c.ok},
            {"error", or_null(c.error)},
            {"elapsed_ms", c.elapsed_ms}};
  }
  nlohmann::json j = {
      {"host", h.host},
      {"hostname", or_null(h.hostname)},
      {"local", h.local},
      {"reachable", h.reachable},
      {"ssh", h.local ? nlohmann::json()
                      : nlohmann::json{{"ok", h.reachable}, {"error", or_null(h.ssh_error)}}},
      {"probe_error", or_null(h.probe_error)},
      {"probe_timed_out", h.probe_timed_out},
      {"address", or_null(h.address)},
      {"rendezvous_port", port},
      {"problems", host_problems(h)}};
  // An unreachable or unprobed host has no facts to show; its object says only why.
  if (!h.reachable || !h.probe_error.empty()) return j;
  nlohmann::json interfaces = nlohmann::json::array();
  for (const auto& i : h.interfaces) {
    nlohmann::json addrs = nlohmann::json::array();
    for (const auto& a : i.addresses) addrs.push_back(a.text);
    interfaces.push_back(
        {{"name", i.name},
         {"kind", interface_kind(i)},
         {"up", i.up},
         {"speed_mbps", i.speed_mbps < 0 ? nlohmann::json() : nlohmann::json(i.speed_mbps)},
         {"addresses", addrs}});
  }
  nlohmann::json vars = nlohmann::json::array();
  for (const auto& v : h.variables) {
    vars.push_back({{"name", v.name},
                    {"value", v.value},
                    {"default", v.is_default},
                    {"user_value", v.user_value ? nlohmann::json(*v.user_value) : nlohmann::json()},
                    {"effective", (v.user_value && v.is_default ? *v.user_value : v.value)}});
  }
  nlohmann::json gpus = {{"device_files", h.gpus.device_files},
                         {"visible", h.gpus.visible},
                         {"models", h.gpus.models}};
  gpus["cuda_visible_devices"] =
      h.gpus.cuda_visible_devices ? nlohmann::json(*h.gpus.cuda_visible_devices) : nlohmann::json();
  nlohmann::json iface = {{"name", or_null(h.iface.name)},
                          {"reason", h.iface.reason},
                          {"warning", or_null(h.iface.warning)}};
  j["gpus"] = gpus;
  j["nccl"] = component_json(h.nccl);
  j["gloo"] = component_json(h.gloo);
  j["openmpi"] = component_json(h.mpi);
  j["torch"] = component_json(h.torch);
  j["infiniband"] = h.infiniband;
  j["numa"] = h.numa;
  j["teardown"] = h.teardown;
  j["interfaces"] = interfaces;
  j["master_addr"] = or_null(h.master_addr);
  j["interface"] = iface;
  j["backend"] = {{"name", h.backend.name}, {"reason", h.backend.reason}};
  j["variables"] = vars;
  j["errors"] = h.errors;
  return j;
}

HostReport host_from_json(const nlohmann::json& j) {
  HostReport h;
  h.host = j.at("host").get<std::string>();
  h.hostname = string_or_empty(j, "hostname");
  h.local = j.at("local").get<bool>();
  h.reachable = j.value("reachable", true);
  if (j.contains("ssh") && j["ssh"].is_object()) h.ssh_error = string_or_empty(j["ssh"], "error");
  h.probe_error = string_or_empty(j, "probe_error");
  h.probe_timed_out = j.value("probe_timed_out", false);
  h.address = string_or_empty(j, "address");
  if (j.contains("rendezvous_port") && j["rendezvous_port"].is_object()) {
    const auto& p = j["rendezvous_port"];
    h.rendezvous_port = PortCheck{p.at("target").get<std::string>(), p.at("ok").get<bool>(),
                                  string_or_empty(p, "error"), p.at("elapsed_ms").get<long>()};
  }
  if (!h.reachable || !h.probe_error.empty()) return h;
  const auto& g = j.at("gpus");
  h.gpus.device_files = g.at("device_files").get<int>();
  h.gpus.visible = g.at("visible").get<int>();
  h.gpus.models = g.at("models").get<std::vector<std::string>>();
  if (g.contains("cuda_visible_devices") && g["cuda_visible_devices"].is_string()) {
    h.gpus.cuda_visible_devices = g["cuda_visible_devices"].get<std::string>();
  }
  h.nccl = component_from(j.at("nccl"));
  h.gloo = component_from(j.at("gloo"));
  h.mpi = component_from(j.at("openmpi"));
  h.torch = component_from(j.at("torch"));
  h.infiniband = j.at("infiniband").get<bool>();
  h.numa = j.value("numa", std::string());
  h.teardown = j.value("teardown", std::string());
  for (const auto& ij : j.at("interfaces")) {
    NetInterface i;
    i.name = ij.at("name").get<std::string>();
    std::string kind = ij.at("kind").get<std::string>();
    i.infiniband = kind == "InfiniBand";
    i.loopback = kind == "loopback";
    i.is_virtual = kind == "virtual";
    i.up = ij.at("up").get<bool>();
    i.speed_mbps = ij.at("speed_mbps").is_number() ? ij["speed_mbps"].get<int>() : -1;
    for (const auto& a : ij.at("addresses")) {
      InterfaceAddress addr;
      addr.text = a.get<std::string>();
      i.addresses.push_back(addr);
    }
    h.interfaces.push_back(std::move(i));
  }
  h.master_addr = string_or_empty(j, "master_addr");
  const auto& ic = j.at("interface");
  h.iface.name = string_or_empty(ic, "name");
  h.iface.reason = string_or_empty(ic, "reason");
  h.iface.warning = string_or_empty(ic, "warning");
  h.backend.name = j.at("backend").at("name").get<std::string>();
  h.backend.reason = j.at("backend").at("reason").get<std::string>();
  for (const auto& v : j.at("variables")) {
    DoctorVariable d;
    d.name = v.at("name").get<std::string>();
    d.value = v.at("value").get<std::string>();
    d.is_default = v.at("default").get<bool>();
    if (v.contains("user_value") && v["user_value"].is_string()) {
      d.user_value = v["user_value"].get<std::string>();
    }
    h.variables.push_back(std::move(d));
  }
  h.errors = j.at("errors").get<std::vector<std::string>>();
  return h;
}

nlohmann::json doctor_json(const DoctorReport& report) {
  nlohmann::json hosts = nlohmann::json::array();
  nlohmann::json problems = nlohmann::json::array();
  for (const auto& h : report.hosts) {
    hosts.push_back(host_json(h));
    for (const auto& p : host_problems(h)) problems.push_back(p);
  }
  return {
      {"hosts", hosts},
      {"ok", problems.empty()},
      {"problems", problems},
      {"remote",
       {{"hosts", or_null(report.remote_hosts)},
        {"rendezvous_port",
         report.rendezvous_port == 0 ? nlohmann::json() : nlohmann::json(report.rendezvous_port)},
        {"status", report.remote_status}}}};
}

}  // namespace mlrun::doctor
