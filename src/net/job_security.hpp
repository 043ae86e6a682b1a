#pragma once
// Who may talk to a job's servers (the parameter servers and the
// coordinator store): members holding the job secret, and nobody else.
//
// The secret is two CURVE secret keys, one for every server and one for
// every client of the job. Servers run ZeroMQ's CURVE mechanism and admit,
// through a ZAP handler, only clients that prove they hold the job's client
// key; clients check the server's key. So a peer without the secret gets
// no reply to anything, and all traffic is encrypted. Torch-free.
#include <zmq.hpp>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "core/environment.hpp"

namespace tandem::net {

// Z85 text, 40 characters each.
struct JobKeys {
  std::string server_public, server_secret;
  std::string client_public, client_secret;
};

// Fresh random keys (libzmq draws them from libsodium).
JobKeys generateJobKeys();

// The secret file: one line "tandem-job-secret-v1 <server secret> <client
// secret>" after comments. Written with O_EXCL and mode 0600 (InputError if
// the file exists or cannot be made). Read back, a file that others may
// read or write is refused, as ssh refuses such a key.
void writeSecretFile(const std::filesystem::path& path, const JobKeys& keys);
JobKeys readSecretFile(const std::filesystem::path& path);
// The file's one line, and back: nullopt for a line that is not one
// (`where` names the source when a key in it is bad: InputError).
std::string secretLine(const JobKeys& keys);
std::optional<JobKeys> parseSecretLine(std::string_view line, const std::string& where);

// The user's own secret, shared by every job of theirs that sees the same
// home directory (as Erlang's cookie): ~/.config/tandem/job-secret, created
// on first use. The home directory is `env`'s HOME, else the password
// database's.
std::filesystem::path userSecretPath(const Environment& env);
JobKeys userSecret(const Environment& env);

// How this process's sockets authenticate. Empty keys: insecure.
class JobSecurity {
 public:
  static JobSecurity insecure() { return JobSecurity(std::nullopt); }
  static JobSecurity withKeys(JobKeys keys) { return JobSecurity(std::move(keys)); }
  bool secure() const { return keys_.has_value(); }
  const JobKeys& keys() const { return *keys_; }
  // Where the keys came from, for logs ("/root/.config/tandem/job-secret").
  std::string source;

 private:
  explicit JobSecurity(std::optional<JobKeys> keys) : keys_(std::move(keys)) {}
  std::optional<JobKeys> keys_;
};

// `env`'s TANDEM_SECRET_FILE when it is set and not empty, else empty: the
// one place the variable is read (tandem launch sets it for its tasks).
inline constexpr const char* kSecretFileVariable = "TANDEM_SECRET_FILE";
std::filesystem::path secretFileFromEnvironment(const Environment& env);

// The process's setting: `secret_file` if given, else TANDEM_SECRET_FILE,
// else the user's secret; none with `insecure` (which logs a warning).
JobSecurity resolveJobSecurity(const std::string& secret_file, bool insecure, const Environment& env);

// Answers ZeroMQ's authentication requests (ZAP, RFC 27) for the server
// sockets of one context: a CURVE peer with the job's client key is let in,
// anyone else is refused before any of its messages is read. Refusals are
// logged once per address, then counted.
class ZapHandler {
 public:
  ZapHandler(zmq::context_t& context, std::string client_public, std::string server_name);
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;
  uint64_t refused() const { return refused_.load(); }

 private:
  void serve();

  zmq::socket_t socket_;
  std::string client_public_;  // Z85
  std::string server_name_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> refused_{0};
  std::thread thread_;
};

// Before bind: makes `socket` a CURVE server of the job `security` belongs
// to and returns the handler that admits members (null when insecure). Keep
// it alive as long as the socket, and destroy it before the context.
std::unique_ptr<ZapHandler> secureServer(zmq::context_t& context, zmq::socket_t& socket,
                                         const std::string& server_name, const JobSecurity& security);
// Same-host parameter servers also listen on a Unix socket, named by their
// TCP port and the job's server key, in a directory only this user can
// enter (TMPDIR/tandem-UID, mode 0700; refused if anyone else owns or can
// enter it). The file system keeps other users out, and a task holding
// another secret looks for another name, so these sockets skip CURVE:
// encrypting a 140 MB model's pushes and pulls made a same-host step 2.4x
// slower. Unix sockets also skip the TCP stack (the 1 PS + 1 worker MLP
// spent ~40 ms a step in exposed transfer over loopback TCP).
std::string sameHostEndpoint(int port, const JobSecurity& security);
bool isSameHostEndpoint(const std::string& endpoint);

// Before connect: makes `socket` a CURVE client of the job `security`
// belongs to.
void secureClient(zmq::socket_t& socket, const JobSecurity& security);

}  // namespace tandem::net
