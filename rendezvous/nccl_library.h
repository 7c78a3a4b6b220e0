// NCCL loaded with dlopen, never linked: mlrun and the client library build and run without it,
// and load it only where a job needs it. The one loader of libnccl for the client library
// (ncclGetUniqueId), the launcher's backend choice, `mlrun doctor` and the NCCL sweep.
#pragma once

#include <string>
#include <vector>

namespace mlrun {

class NcclLibrary {
 public:
  /// Loads the first of names that dlopen finds (RTLD_NOW | RTLD_LOCAL). When none loads,
  /// loaded() is false and error() says why: "cannot load libnccl.so.2: DLERROR", or with
  /// several names "cannot load NCCL (tried libnccl.so.2, libnccl.so): DLERROR" (the last one's).
  explicit NcclLibrary(const std::vector<std::string>& names = {"libnccl.so.2"});
  /// Unloads it, unless keep() was called.
  ~NcclLibrary();
  NcclLibrary(const NcclLibrary&) = delete;
  NcclLibrary& operator=(const NcclLibrary&) = delete;

  /// The process's copy, loaded at the first call (thread-safe) and never unloaded: NCCL's own
  /// threads (a unique id's bootstrap root, a communicator's) run its code until the process ends.
  static const NcclLibrary& resident();

  bool loaded() const { return handle_ != nullptr; }
  /// Why it is not loaded; empty when it is.
  const std::string& error() const { return error_; }
  /// The name it was loaded by ("libnccl.so.2"); empty when not loaded.
  const std::string& name() const { return name_; }
  /// dlopen's handle (for dlinfo); nullptr when not loaded.
  void* handle() const { return handle_; }
  /// Its function called name as a pointer of type Fn; nullptr when not loaded or it has none.
  template <typename Fn>
  Fn function(const char* name) const {
    return reinterpret_cast<Fn>(symbol(name));
  }
  void* symbol(const char* name) const;
  /// "NAME has no SYMBOL": what to say when function() gave nullptr to a loaded library.
  std::string missing(const char* symbol) const;
  /// ncclGetVersion's code (X*10000+Y*100+Z from 2.9 on); 0 with *why set when the library is
  /// not loaded, has no ncclGetVersion, or it fails.
  int version(std::string* why) const;
  /// ncclGetErrorString(rc), or "no description" when the library has none.
  std::string describe(int rc) const;
  /// Keeps it loaded past this object's end (NCCL's threads may outlive it).
  void keep() { kept_ = true; }

 private:
  void* handle_ = nullptr;
  std::string name_;
  std::string error_;
  bool kept_ = false;
};

}  // namespace mlrun
