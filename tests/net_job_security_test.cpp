// Job secrets: the file's format and mode, and what a server secured with
// one (CURVE + ZAP) gives members, outsiders and other jobs' members.
#include <sys/stat.h>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/deadline.hpp"
#include "core/error.hpp"
#include "net/frame.hpp"
#include "net/job_security.hpp"
#include "net/request_client.hpp"
#include "support/expect_input_error.hpp"
#include "support/test_messages.hpp"
#include "support/test_security.hpp"

namespace tandem::net {
namespace {

using namespace std::chrono_literals;

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("tandem-secret-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

TEST(JobSecret, IsWrittenPrivateAndReadBack) {
  TempDir dir;
  const auto path = dir / "secret";
  const JobKeys keys = generateJobKeys();
  writeSecretFile(path, keys);
  struct stat st{};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const JobKeys back = readSecretFile(path);
  EXPECT_EQ(back.server_secret, keys.server_secret);
  EXPECT_EQ(back.client_secret, keys.client_secret);
  EXPECT_EQ(back.server_public, keys.server_public);
  EXPECT_EQ(back.client_public, keys.client_public);
  EXPECT_NE(keys.server_secret, keys.client_secret);
  EXPECT_NE(generateJobKeys().client_secret, keys.client_secret);
  // Never overwritten: another job's members may hold it.
  testing::expectInputError([&] { writeSecretFile(path, generateJobKeys()); }, {"cannot create", "File exists"});
  EXPECT_EQ(readSecretFile(path).client_secret, keys.client_secret);
}

TEST(JobSecret, AFileOthersCanReadOrAMalformedOneIsRefusedNamingIt) {
  TempDir dir;
  const auto path = dir / "secret";
  writeSecretFile(path, generateJobKeys());
  std::filesystem::permissions(path, std::filesystem::perms::group_read | std::filesystem::perms::others_read,
                               std::filesystem::perm_options::add);
  testing::expectInputError([&] { readSecretFile(path); }, {path.string(), "mode 0644", "chmod 600"});

  const auto bad = dir / "bad";
  {
    std::ofstream out(bad);
    out << "# a comment\nnot a secret\n";
  }
  std::filesystem::permissions(bad, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::replace);
  testing::expectInputError([&] { readSecretFile(bad); }, {bad.string(), "tandem-job-secret-v1"});
  testing::expectInputError([&] { readSecretFile(dir / "missing"); }, {"missing", "tandem secret new"});
}

// A ROUTER secured with `security` that answers every request it reads
// with kStoreValue.
class SecuredServer {
 public:
  explicit SecuredServer(const JobSecurity& security) : socket_(context_, zmq::socket_type::router) {
    configureSocket(socket_);
    zap_ = secureServer(context_, socket_, "the secured server", security);
    socket_.bind(tcpEndpoint("127.0.0.1", -1));
    endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
    thread_ = std::thread([this] { serve(); });
  }
  ~SecuredServer() {
    stop_ = true;
    thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }
  int served() const { return served_.load(); }
  uint64_t refused() const { return zap_ ? zap_->refused() : 0; }

 private:
  void serve() {
    std::vector<zmq::message_t> parts;
    while (!stop_) {
      if (!waitReadable(socket_, 20ms)) continue;
      const size_t total = receiveParts(socket_, parts, 3);
      if (total != 3) continue;
      ++served_;
      Frame f = decodeFrame(std::span(parts).subspan(1), 2, kMaxPayloadBytes, "the client", testing::kTestMessages);
      FrameHeader h = f.header;
      h.type = testing::kAnswer;
      sendFrame(socket_, h, copyPayload("value"), &parts[0]);
    }
  }

  zmq::context_t context_{1};
  std::unique_ptr<ZapHandler> zap_;
  zmq::socket_t socket_;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::atomic<int> served_{0};
  std::thread thread_;
};

// Sends an ask from a DEALER secured as `as` (nullopt: no CURVE at
// all) and returns whether any reply came within `budget`.
bool answered(const std::string& endpoint, const std::optional<JobSecurity>& as, std::chrono::milliseconds budget) {
  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  configureSocket(socket);
  if (as) secureClient(socket, *as);
  socket.connect(endpoint);
  if (!sendFrame(socket, {.type = testing::kAsk, .request_id = 1}, copyPayload("key"))) return false;
  std::vector<zmq::message_t> parts;
  const Deadline deadline = Deadline::after(budget);
  while (!deadline.expired()) {
    if (waitReadable(socket, deadline.remaining()) && receiveParts(socket, parts, 2) > 0) return true;
  }
  return false;
}

TEST(JobSecurity, OnlyMembersOfTheJobAreAnswered) {
  const JobSecurity job = JobSecurity::withKeys(generateJobKeys());
  SecuredServer server(job);
  EXPECT_TRUE(answered(server.endpoint(), job, 5000ms)) << "a member was not answered";
  EXPECT_EQ(server.served(), 1);

  EXPECT_FALSE(answered(server.endpoint(), std::nullopt, 700ms)) << "a peer without CURVE was answered";
  const JobSecurity other_job = JobSecurity::withKeys(generateJobKeys());
  EXPECT_FALSE(answered(server.endpoint(), other_job, 700ms)) << "a member of another job was answered";
  // Another job's client key, presented to this job's server key: the
  // handshake completes only as far as the ZAP check, which refuses it.
  JobKeys stolen_server_key = generateJobKeys();
  stolen_server_key.server_public = job.keys().server_public;
  EXPECT_FALSE(answered(server.endpoint(), JobSecurity::withKeys(stolen_server_key), 700ms))
      << "a client that knows only the server's public key was answered";
  EXPECT_EQ(server.served(), 1) << "an outsider's request reached the server";
  EXPECT_GE(server.refused(), 1u);
  EXPECT_TRUE(answered(server.endpoint(), job, 5000ms)) << "the server stopped serving members";
}

TEST(JobSecurity, ARequestClientOfTheJobIsServed) {
  const JobSecurity job = JobSecurity::withKeys(generateJobKeys());
  SecuredServer server(job);
  zmq::context_t context(1);
  RequestClient client(context, server.endpoint(), "the secured server", testing::kTestMessages, job);
  auto reply = client.request({.type = testing::kAsk}, copyPayload("key"), Deadline::after(5000ms));
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->text(), "value");
}

}  // namespace
}  // namespace tandem::net
