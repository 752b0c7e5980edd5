#include "distributed/env_launch.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <meganeura/distributed.h>

namespace mn::dist {

namespace {

using Clock = std::chrono::steady_clock;

// Every message starts with these bytes, so that a stray connection is told apart.
constexpr uint32_t kMagic = 0x6d6e6964;  // "mnid"

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int int_from_env(const char* name, long low, long high) {
  const char* v = env(name);
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || errno != 0 || n < low || n > high) {
    throw Error(fmt::format("{} is '{}', expected a whole number from {} to {}", name, v, low,
                            high));
  }
  return static_cast<int>(n);
}

// Closes the descriptor when it goes out of scope.
struct Socket {
  int fd = -1;
  explicit Socket(int f) : fd(f) {}
  Socket(Socket&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Socket(const Socket&) = delete;
  ~Socket() {
    if (fd >= 0) close(fd);
  }
};

int milliseconds_left(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

[[noreturn]] void fail(const EnvLaunch& job, const std::string& what) {
  throw DistributedError(fmt::format("rank {} of {}: {}", job.rank, job.size, what));
}

// Waits until `fd` is ready for `events`; false at the deadline.
bool ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = poll(&p, 1, milliseconds_left(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return false;
  }
}

void send_all(const EnvLaunch& job, int fd, const void* data, size_t n,
              Clock::time_point deadline) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    if (!ready(fd, POLLOUT, deadline)) fail(job, "sending the NCCL id timed out");
    const ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) fail(job, fmt::format("sending the NCCL id failed: {}", std::strerror(errno)));
    p += k;
    n -= static_cast<size_t>(k);
  }
}

void receive_all(const EnvLaunch& job, int fd, void* data, size_t n, Clock::time_point deadline,
                 const std::string& from) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    if (!ready(fd, POLLIN, deadline)) fail(job, "no answer from " + from + " in time");
    const ssize_t k = recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) fail(job, from + " closed the connection before sending everything");
    p += k;
    n -= static_cast<size_t>(k);
  }
}

struct Hello {  // a rank's first message to rank 0, and rank 0's answer before the bytes
  uint32_t magic, rank, size, bytes;
};

void serve(std::span<std::byte> bytes, const EnvLaunch& job, Clock::time_point deadline,
           double timeout) {
  // IPv6 accepting IPv4 too, or IPv4 alone where the host has no IPv6.
  int family = AF_INET6;
  int fd = socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) {
    family = AF_INET;
    fd = socket(AF_INET, SOCK_STREAM, 0);
  }
  Socket listener(fd);
  if (listener.fd < 0) fail(job, fmt::format("socket: {}", std::strerror(errno)));
  const int yes = 1, no = 0;
  setsockopt(listener.fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  int rc = 0;
  if (family == AF_INET6) {
    setsockopt(listener.fd, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof no);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<uint16_t>(job.master_port));
    rc = bind(listener.fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(job.master_port));
    rc = bind(listener.fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  if (rc != 0 || listen(listener.fd, job.size) != 0) {
    fail(job, fmt::format("cannot listen on MASTER_PORT {}: {}", job.master_port,
                          std::strerror(errno)));
  }
  std::vector<bool> seen(static_cast<size_t>(job.size), false);
  for (int answered = 1; answered < job.size;) {
    if (!ready(listener.fd, POLLIN, deadline)) {
      std::string missing;
      for (int r = 1; r < job.size; ++r) {
        if (!seen[static_cast<size_t>(r)]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      fail(job, fmt::format("ranks {} did not connect to port {} within {} s "
                            "(MN_DISTRIBUTED_TIMEOUT sets the limit)",
                            missing, job.master_port, timeout));
    }
    Socket peer(accept(listener.fd, nullptr, nullptr));
    if (peer.fd < 0) continue;
    Hello h{};
    receive_all(job, peer.fd, &h, sizeof h, deadline, "a connecting rank");
    if (h.magic != kMagic) continue;  // not one of ours
    if (static_cast<int>(h.size) != job.size || h.rank == 0 ||
        static_cast<int>(h.rank) >= job.size || seen[h.rank]) {
      fail(job, fmt::format("a process says it is rank {} of {}, in a job of {} ranks{}", h.rank,
                            h.size, job.size, h.rank < seen.size() && seen[h.rank] ? " (twice)" : ""));
    }
    const Hello answer{kMagic, 0, static_cast<uint32_t>(job.size),
                       static_cast<uint32_t>(bytes.size())};
    send_all(job, peer.fd, &answer, sizeof answer, deadline);
    send_all(job, peer.fd, bytes.data(), bytes.size(), deadline);
    seen[h.rank] = true;
    ++answered;
  }
}

void fetch(std::span<std::byte> bytes, const EnvLaunch& job, Clock::time_point deadline,
           double timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(job.master_port);
  if (const int rc = getaddrinfo(job.master_addr.c_str(), port.c_str(), &hints, &found); rc != 0) {
    fail(job, fmt::format("MASTER_ADDR '{}': {}", job.master_addr, gai_strerror(rc)));
  }
  const std::string rank0 = fmt::format("rank 0 ({}:{})", job.master_addr, job.master_port);
  // Rank 0 may not listen yet: try every address until one answers or time runs out.
  for (;;) {
    for (addrinfo* a = found; a; a = a->ai_next) {
      Socket s(socket(a->ai_family, a->ai_socktype, a->ai_protocol));
      if (s.fd < 0 || connect(s.fd, a->ai_addr, a->ai_addrlen) != 0) continue;
      freeaddrinfo(found);
      const Hello h{kMagic, static_cast<uint32_t>(job.rank), static_cast<uint32_t>(job.size),
                    static_cast<uint32_t>(bytes.size())};
      send_all(job, s.fd, &h, sizeof h, deadline);
      Hello answer{};
      receive_all(job, s.fd, &answer, sizeof answer, deadline, rank0);
      if (answer.magic != kMagic || static_cast<int>(answer.size) != job.size ||
          answer.bytes != bytes.size()) {
        fail(job, fmt::format("{} answered for a job of {} ranks, this rank is in one of {}", rank0,
                              answer.size, job.size));
      }
      receive_all(job, s.fd, bytes.data(), bytes.size(), deadline, rank0);
      return;
    }
    if (Clock::now() >= deadline) {
      freeaddrinfo(found);
      fail(job, fmt::format("could not reach {} within {} s (MN_DISTRIBUTED_TIMEOUT sets the "
                            "limit)",
                            rank0, timeout));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

bool launched_by_env() { return env("WORLD_SIZE") != nullptr; }

std::optional<EnvLaunch> env_launch() {
  if (!launched_by_env()) return std::nullopt;
  EnvLaunch job;
  job.size = int_from_env("WORLD_SIZE", 1, 1 << 20);
  if (job.size == 1 && !env("RANK")) return job;
  if (!env("RANK")) throw Error("WORLD_SIZE is set but RANK is not: every process needs its rank");
  job.rank = int_from_env("RANK", 0, job.size - 1);
  if (job.size == 1) return job;
  const char* addr = env("MASTER_ADDR");
  if (!addr) throw Error("MASTER_ADDR is not set: a job of several ranks needs rank 0's host");
  job.master_addr = addr;
  if (!env("MASTER_PORT")) throw Error("MASTER_PORT is not set: a job of several ranks needs it");
  job.master_port = int_from_env("MASTER_PORT", 1, 65535);
  return job;
}

void share_from_rank0(std::span<std::byte> bytes, const EnvLaunch& job, double timeout_seconds) {
  if (job.size == 1) return;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_seconds));
  if (job.rank == 0) {
    serve(bytes, job, deadline, timeout_seconds);
  } else {
    fetch(bytes, job, deadline, timeout_seconds);
  }
}

}  // namespace mn::dist
