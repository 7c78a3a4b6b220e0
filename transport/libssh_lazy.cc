// The ssh_* functions mlrun uses, forwarding to libssh opened with dlopen on the first call
// (transport/libssh_lazy.h says why). Each is declared by libssh's own headers, so a signature
// that does not match the library's fails to compile. A function added to transport/ssh_*.cc
// needs a line here, or the link fails with an undefined ssh_* symbol.
#include "transport/libssh_lazy.h"

#include <dlfcn.h>

#include <mutex>
#include <stdexcept>
#include <string>

#include <libssh/callbacks.h>
#include <libssh/libssh.h>

namespace mlrun::ssh_detail {
namespace {

// The soname libssh has had since 0.5 (Debian: libssh-4).
constexpr const char* kLibssh = "libssh.so.4";

void* libssh_handle() {
  static void* handle = nullptr;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    handle = dlopen(kLibssh, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      error = std::string("cannot load ") + kLibssh +
              " (needed for SSH): " + (why != nullptr ? why : "unknown reason") +
              "; install libssh (Debian: libssh-4)";
    }
  });
  if (handle == nullptr) throw std::runtime_error(error);
  return handle;
}

template <typename F>
F* resolve(const char* name) {
  void* symbol = dlsym(libssh_handle(), name);
  if (symbol == nullptr) {
    throw std::runtime_error(std::string(kLibssh) + " has no " + name +
                             "; mlrun needs libssh 0.9 or newer");
  }
  return reinterpret_cast<F*>(symbol);
}

}  // namespace

void load_libssh() {
  libssh_handle();
}

}  // namespace mlrun::ssh_detail

// Defines NAME with libssh's signature; the first call looks the real function up.
#define MLRUN_LIBSSH(ret, name, params, args)                                      \
  extern "C" ret name params {                                                     \
    static auto* const real = mlrun::ssh_detail::resolve<decltype(::name)>(#name); \
    return real args;                                                              \
  }

MLRUN_LIBSSH(int, ssh_channel_close, (ssh_channel c), (c))
MLRUN_LIBSSH(void, ssh_channel_free, (ssh_channel c), (c))
MLRUN_LIBSSH(int, ssh_channel_is_closed, (ssh_channel c), (c))
MLRUN_LIBSSH(int, ssh_channel_is_eof, (ssh_channel c), (c))
MLRUN_LIBSSH(int, ssh_channel_is_open, (ssh_channel c), (c))
MLRUN_LIBSSH(ssh_channel, ssh_channel_new, (ssh_session s), (s))
MLRUN_LIBSSH(int, ssh_channel_open_session, (ssh_channel c), (c))
MLRUN_LIBSSH(int, ssh_channel_request_exec, (ssh_channel c, const char* cmd), (c, cmd))
MLRUN_LIBSSH(int, ssh_channel_send_eof, (ssh_channel c), (c))
MLRUN_LIBSSH(int, ssh_channel_write, (ssh_channel c, const void* data, uint32_t len),
             (c, data, len))
MLRUN_LIBSSH(void, ssh_clean_pubkey_hash, (unsigned char** hash), (hash))
MLRUN_LIBSSH(int, ssh_connect, (ssh_session s), (s))
MLRUN_LIBSSH(void, ssh_disconnect, (ssh_session s), (s))
MLRUN_LIBSSH(int, ssh_event_add_session, (ssh_event e, ssh_session s), (e, s))
MLRUN_LIBSSH(int, ssh_event_dopoll, (ssh_event e, int timeout), (e, timeout))
MLRUN_LIBSSH(void, ssh_event_free, (ssh_event e), (e))
MLRUN_LIBSSH(ssh_event, ssh_event_new, (void), ())
MLRUN_LIBSSH(int, ssh_event_remove_session, (ssh_event e, ssh_session s), (e, s))
MLRUN_LIBSSH(void, ssh_free, (ssh_session s), (s))
MLRUN_LIBSSH(const char*, ssh_get_error, (void* error), (error))
MLRUN_LIBSSH(socket_t, ssh_get_fd, (ssh_session s), (s))
MLRUN_LIBSSH(char*, ssh_get_fingerprint_hash,
             (enum ssh_publickey_hash_type type, unsigned char* hash, size_t len),
             (type, hash, len))
MLRUN_LIBSSH(int, ssh_get_publickey_hash,
             (const ssh_key key, enum ssh_publickey_hash_type type, unsigned char** hash,
              size_t* hlen),
             (key, type, hash, hlen))
MLRUN_LIBSSH(int, ssh_get_server_publickey, (ssh_session s, ssh_key* key), (s, key))
MLRUN_LIBSSH(int, ssh_get_status, (ssh_session s), (s))
MLRUN_LIBSSH(int, ssh_is_connected, (ssh_session s), (s))
MLRUN_LIBSSH(void, ssh_key_free, (ssh_key key), (key))
MLRUN_LIBSSH(enum ssh_keytypes_e, ssh_key_type, (const ssh_key key), (key))
MLRUN_LIBSSH(const char*, ssh_key_type_to_char, (enum ssh_keytypes_e type), (type))
MLRUN_LIBSSH(ssh_session, ssh_new, (void), ())
MLRUN_LIBSSH(int, ssh_options_get, (ssh_session s, enum ssh_options_e type, char** value),
             (s, type, value))
MLRUN_LIBSSH(int, ssh_options_get_port, (ssh_session s, unsigned int* port), (s, port))
MLRUN_LIBSSH(int, ssh_options_parse_config, (ssh_session s, const char* file), (s, file))
MLRUN_LIBSSH(int, ssh_options_set, (ssh_session s, enum ssh_options_e type, const void* value),
             (s, type, value))
MLRUN_LIBSSH(enum ssh_known_hosts_e, ssh_session_is_known_server, (ssh_session s), (s))
MLRUN_LIBSSH(void, ssh_set_blocking, (ssh_session s, int blocking), (s, blocking))
MLRUN_LIBSSH(int, ssh_set_callbacks, (ssh_session s, ssh_callbacks cb), (s, cb))
MLRUN_LIBSSH(int, ssh_set_channel_callbacks, (ssh_channel c, ssh_channel_callbacks cb), (c, cb))
MLRUN_LIBSSH(int, ssh_set_log_callback, (ssh_logging_callback cb), (cb))
MLRUN_LIBSSH(int, ssh_set_log_level, (int level), (level))
MLRUN_LIBSSH(void, ssh_string_free_char, (char* s), (s))
MLRUN_LIBSSH(int, ssh_userauth_publickey_auto,
             (ssh_session s, const char* username, const char* passphrase),
             (s, username, passphrase))
