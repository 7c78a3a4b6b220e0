#include "rendezvous/nccl_library.h"

#include <dlfcn.h>

#include <fmt/format.h>

namespace mlrun {

NcclLibrary::NcclLibrary(const std::vector<std::string>& names) {
  std::string last = "no names to try";
  for (const auto& n : names) {
    handle_ = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ != nullptr) {
      name_ = n;
      return;
    }
    const char* e = dlerror();
    last = e != nullptr ? e : n + ": cannot be loaded";
  }
  error_ = names.size() == 1
               ? fmt::format("cannot load {}: {}", names.front(), last)
               : fmt::format("cannot load NCCL (tried {}): {}", fmt::join(names, ", "), last);
}

NcclLibrary::~NcclLibrary() {
  if (handle_ != nullptr && !kept_) dlclose(handle_);
}

const NcclLibrary& NcclLibrary::resident() {
  static NcclLibrary* library = [] {
    auto* l = new NcclLibrary();  // Never deleted: see the declaration.
    l->keep();
    return l;
  }();
  return *library;
}

void* NcclLibrary::symbol(const char* name) const {
  return handle_ != nullptr ? dlsym(handle_, name) : nullptr;
}

std::string NcclLibrary::missing(const char* symbol) const {
  return fmt::format("{} has no {}", name_, symbol);
}

int NcclLibrary::version(std::string* why) const {
  if (!loaded()) {
    *why = error_;
    return 0;
  }
  auto get_version = function<int (*)(int*)>("ncclGetVersion");
  if (get_version == nullptr) {
    *why = missing("ncclGetVersion");
    return 0;
  }
  int code = 0;
  if (int rc = get_version(&code); rc != 0) {
    *why = fmt::format("ncclGetVersion failed with code {}", rc);
    return 0;
  }
  return code;
}

std::string NcclLibrary::describe(int rc) const {
  auto error_string = function<const char* (*)(int)>("ncclGetErrorString");
  const char* text = error_string != nullptr ? error_string(rc) : nullptr;
  return text != nullptr ? text : "no description";
}

}  // namespace mlrun
