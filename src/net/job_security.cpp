#include "net/job_security.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <zmq_addon.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <vector>

#include "core/error.hpp"
#include "core/fnv1a.hpp"
#include "core/logging.hpp"

namespace tandem::net {
namespace {

constexpr const char* kMagic = "tandem-job-secret-v1";
constexpr size_t kZ85KeyChars = 40;

std::string publicOf(const std::string& secret, const std::string& where) {
  char public_key[kZ85KeyChars + 1] = {};
  if (secret.size() != kZ85KeyChars || zmq_curve_public(public_key, secret.c_str()) != 0) {
    throw InputError(fmt::format("{}: a key is not a 40-character Z85 CURVE secret key", where));
  }
  return public_key;
}

void requireCurve() {
  if (!zmq_has("curve")) {
    throw Error("this libzmq was built without CURVE: the job's ports cannot be secured (pass --insecure to run "
                "without authentication)");
  }
}

std::string errnoText(int error) { return std::strerror(error); }

}  // namespace

JobKeys generateJobKeys() {
  requireCurve();
  char public_key[kZ85KeyChars + 1] = {}, secret_key[kZ85KeyChars + 1] = {};
  JobKeys keys;
  if (zmq_curve_keypair(public_key, secret_key) != 0) throw Error("cannot generate a CURVE key pair");
  keys.server_public = public_key;
  keys.server_secret = secret_key;
  if (zmq_curve_keypair(public_key, secret_key) != 0) throw Error("cannot generate a CURVE key pair");
  keys.client_public = public_key;
  keys.client_secret = secret_key;
  return keys;
}

void writeSecretFile(const std::filesystem::path& path, const JobKeys& keys) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw InputError(fmt::format("cannot create the job secret {}: {}", path.string(), errnoText(errno)));
  const std::string text = fmt::format(
      "# A Tandem job secret: whoever can read this file can join the job and read its traffic.\n"
      "# Keep it mode 0600; copy it only to the hosts of the job.\n{}\n",
      secretLine(keys));
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int error = errno;
  const bool synced = written && ::fsync(fd) == 0;
  ::close(fd);
  if (!written || !synced) {
    std::filesystem::remove(path);
    throw Error(fmt::format("cannot write the job secret {}: {}", path.string(), errnoText(error)));
  }
}

JobKeys readSecretFile(const std::filesystem::path& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) {
    throw InputError(fmt::format("job secret {}: {} (make one with 'tandem secret new {}')", path.string(),
                                 errnoText(errno), path.string()));
  }
  if ((st.st_mode & 077) != 0) {
    throw InputError(fmt::format("job secret {} is open to other users (mode {:04o}); run 'chmod 600 {}'",
                                 path.string(), st.st_mode & 0777, path.string()));
  }
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line.front() == '#') continue;
    if (auto keys = parseSecretLine(line, path.string())) return *keys;
    break;
  }
  throw InputError(fmt::format("job secret {}: no '{} <server key> <client key>' line (make one with 'tandem "
                               "secret new FILE')",
                               path.string(), kMagic));
}

std::string secretLine(const JobKeys& keys) {
  return fmt::format("{} {} {}", kMagic, keys.server_secret, keys.client_secret);
}

std::optional<JobKeys> parseSecretLine(std::string_view line, const std::string& where) {
  std::istringstream fields{std::string(line)};
  std::string magic, server_secret, client_secret, extra;
  fields >> magic >> server_secret >> client_secret;
  if (magic != kMagic || client_secret.empty() || (fields >> extra)) return std::nullopt;
  requireCurve();
  JobKeys keys;
  keys.server_secret = server_secret;
  keys.client_secret = client_secret;
  keys.server_public = publicOf(server_secret, where);
  keys.client_public = publicOf(client_secret, where);
  return keys;
}

std::filesystem::path userSecretPath(const Environment& env) {
  std::string dir = variableOr(env, "HOME", "");
  if (dir.empty()) {
    if (const passwd* pw = ::getpwuid(::getuid()); pw != nullptr && pw->pw_dir != nullptr) dir = pw->pw_dir;
  }
  if (dir.empty()) throw InputError("no home directory for the user's job secret: pass --secret-file FILE");
  return std::filesystem::path(dir) / ".config" / "tandem" / "job-secret";
}

JobKeys userSecret(const Environment& env) {
  const auto path = userSecretPath(env);
  if (std::filesystem::exists(path)) return readSecretFile(path);
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  ::chmod(path.parent_path().c_str(), 0700);
  // Written aside, then linked into place: of several processes starting at
  // once, one file wins and every process reads that one.
  const auto aside = path.parent_path() / fmt::format(".job-secret.{}", ::getpid());
  std::filesystem::remove(aside, ec);
  writeSecretFile(aside, generateJobKeys());
  const bool linked = ::link(aside.c_str(), path.c_str()) == 0;
  const int error = errno;
  std::filesystem::remove(aside, ec);
  if (!linked && error != EEXIST) {
    throw InputError(fmt::format("cannot create the user's job secret {}: {} (pass --secret-file FILE)",
                                 path.string(), errnoText(error)));
  }
  if (linked) TANDEM_LOG_INFO("created this user's job secret {}", path.string());
  return readSecretFile(path);
}

std::filesystem::path secretFileFromEnvironment(const Environment& env) {
  return variableOr(env, kSecretFileVariable, "");
}

JobSecurity resolveJobSecurity(const std::string& secret_file, bool insecure, const Environment& env) {
  if (insecure) {
    TANDEM_LOG_WARN("--insecure: the job's ports take anyone who reaches them, unauthenticated and unencrypted");
    JobSecurity none = JobSecurity::insecure();
    none.source = "--insecure";
    return none;
  }
  const std::filesystem::path path =
      secret_file.empty() ? secretFileFromEnvironment(env) : std::filesystem::path(secret_file);
  JobSecurity security = JobSecurity::withKeys(path.empty() ? userSecret(env) : readSecretFile(path));
  security.source = path.empty() ? userSecretPath(env).string() : path.string();
  return security;
}

ZapHandler::ZapHandler(zmq::context_t& context, std::string client_public, std::string server_name)
    : socket_(context, zmq::socket_type::rep),
      client_public_(std::move(client_public)),
      server_name_(std::move(server_name)) {
  socket_.set(zmq::sockopt::linger, 0);
  // The address libzmq asks; one handler per context.
  socket_.bind("inproc://zeromq.zap.01");
  thread_ = std::thread([this] { serve(); });
}

ZapHandler::~ZapHandler() {
  stop_ = true;
  thread_.join();
}

void ZapHandler::serve() {
  std::set<std::string> logged;  // addresses already named in the log
  uint8_t expected[32] = {};
  zmq_z85_decode(expected, client_public_.c_str());
  std::vector<zmq::message_t> request;
  while (!stop_) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(50));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      throw;
    }
    if (!(item.revents & ZMQ_POLLIN)) continue;
    request.clear();
    if (!zmq::recv_multipart(socket_, std::back_inserter(request), zmq::recv_flags::dontwait)) continue;
    // [version, request id, domain, address, identity, mechanism, credentials...]
    auto text = [&](size_t i) { return i < request.size() ? request[i].to_string() : std::string(); };
    const std::string mechanism = text(5);
    const bool member = mechanism == "CURVE" && request.size() >= 7 && request[6].size() == sizeof(expected) &&
                        std::memcmp(request[6].data(), expected, sizeof(expected)) == 0;
    if (!member) {
      const uint64_t count = ++refused_;
      const std::string address = text(3);
      if (logged.size() < 64 && logged.insert(address).second) {
        TANDEM_LOG_WARN("{}: refused a connection from {} ({}): it does not hold this job's secret; further refusals "
                        "from there are counted, not logged ({} so far)",
                        server_name_, address, mechanism, count);
      }
    }
    std::vector<zmq::message_t> reply;
    reply.emplace_back(std::string("1.0"));
    reply.emplace_back(text(1));
    reply.emplace_back(std::string(member ? "200" : "400"));
    reply.emplace_back(std::string(member ? "OK" : "not a member of this job"));
    reply.emplace_back(std::string());
    reply.emplace_back(std::string());
    zmq::send_multipart(socket_, reply);
  }
}

std::unique_ptr<ZapHandler> secureServer(zmq::context_t& context, zmq::socket_t& socket,
                                         const std::string& server_name, const JobSecurity& security) {
  if (!security.secure()) return nullptr;
  auto handler = std::make_unique<ZapHandler>(context, security.keys().client_public, server_name);
  socket.set(zmq::sockopt::curve_server, true);
  socket.set(zmq::sockopt::curve_secretkey, security.keys().server_secret);
  socket.set(zmq::sockopt::zap_domain, "tandem");
  return handler;
}

std::string sameHostEndpoint(int port, const JobSecurity& security) {
  static const std::filesystem::path dir = [] {
    const auto path = std::filesystem::temp_directory_path() / fmt::format("tandem-{}", ::getuid());
    if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
      throw Error(fmt::format("cannot make the private socket directory {}: {}", path.string(), errnoText(errno)));
    }
    struct stat st{};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid() ||
        (st.st_mode & 077) != 0) {
      throw Error(fmt::format("{} is not a directory that only this user (uid {}) owns and can enter; remove it, "
                              "or set TMPDIR elsewhere",
                              path.string(), ::getuid()));
    }
    return path;
  }();
  if (!security.secure()) return fmt::format("ipc://{}/ps-{}", dir.string(), port);
  Fnv1a job;  // names the job, not a secret: the server key is public
  job.add(security.keys().server_public.data(), security.keys().server_public.size());
  return fmt::format("ipc://{}/ps-{}-{:016x}", dir.string(), port, job.value());
}

bool isSameHostEndpoint(const std::string& endpoint) { return endpoint.starts_with("ipc://"); }

void secureClient(zmq::socket_t& socket, const JobSecurity& security) {
  if (!security.secure()) return;
  socket.set(zmq::sockopt::curve_serverkey, security.keys().server_public);
  socket.set(zmq::sockopt::curve_publickey, security.keys().client_public);
  socket.set(zmq::sockopt::curve_secretkey, security.keys().client_secret);
}

}  // namespace tandem::net
