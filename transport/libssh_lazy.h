#pragma once

// libssh is opened with dlopen on first use instead of being linked (issue 11): linked, it and
// what it needs (libcrypto, zlib, GSSAPI/Kerberos) are loaded and initialised before main() in
// every mlrun process, the Slurm agents and the local head included, which never use SSH. The
// ssh_* functions mlrun calls are defined in transport/libssh_lazy.cc and forward to the library.

namespace mlrun::ssh_detail {

/// Opens libssh (once per process). Throws std::runtime_error naming the library and the
/// loader's reason when it cannot be opened. Each forwarded ssh_* function calls it first.
void load_libssh();

}  // namespace mlrun::ssh_detail
