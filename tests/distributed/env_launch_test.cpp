// Jobs started by environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, as torchrun sets
// them): the variables read and checked, and rank 0's NCCL id shared over TCP between threads
// standing in for the ranks, including the ways it fails (a rank that never comes, a rank of
// another job, nobody listening) within the timeout.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <meganeura/distributed.h>

#include "distributed/env_launch.h"
#include "support/expect_error.h"
#include "support/scoped_env.h"

namespace mn::dist {
namespace {

using testing::ScopedEnv;

// `f` throws E with `fragment` in its message.
template <class E, class F>
void expect_message(F&& f, const std::string& fragment) {
  expect_error<E>(std::forward<F>(f), {fragment.c_str()});
}

// A port no one listens on now (the kernel's choice for port 0, released again).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

struct Env {
  ScopedEnv world, rank, addr, port;
  Env(const char* w, const char* r, const char* a, const char* p)
      : world("WORLD_SIZE", w), rank("RANK", r), addr("MASTER_ADDR", a), port("MASTER_PORT", p) {}
};

TEST(EnvLaunch, ReadsTheLaunchersVariables) {
  {
    Env e(nullptr, nullptr, nullptr, nullptr);
    EXPECT_FALSE(launched_by_env());
    EXPECT_FALSE(env_launch().has_value());
  }
  {
    Env e("1", nullptr, nullptr, nullptr);  // a job of one needs nothing else
    ASSERT_TRUE(env_launch().has_value());
    EXPECT_EQ(env_launch()->size, 1);
    EXPECT_EQ(env_launch()->rank, 0);
  }
  Env e("4", "3", "node0.example", "29500");
  EXPECT_TRUE(launched_by_env());
  const EnvLaunch job = env_launch().value();
  EXPECT_EQ(job.size, 4);
  EXPECT_EQ(job.rank, 3);
  EXPECT_EQ(job.master_addr, "node0.example");
  EXPECT_EQ(job.master_port, 29500);
}

TEST(EnvLaunch, BadVariablesAreNamed) {
  struct Bad {
    const char *world, *rank, *addr, *port, *expected;
  };
  for (const Bad& b : {
           Bad{"two", "0", "h", "1", "WORLD_SIZE is 'two', expected a whole number from 1"},
           Bad{"0", "0", "h", "1", "WORLD_SIZE is '0', expected a whole number from 1"},
           Bad{"2", nullptr, "h", "1", "WORLD_SIZE is set but RANK is not"},
           Bad{"2", "2", "h", "1", "RANK is '2', expected a whole number from 0 to 1"},
           Bad{"2", "-1", "h", "1", "RANK is '-1', expected a whole number from 0 to 1"},
           Bad{"2", "1", nullptr, "1", "MASTER_ADDR is not set"},
           Bad{"2", "1", "h", nullptr, "MASTER_PORT is not set"},
           Bad{"2", "1", "h", "70000", "MASTER_PORT is '70000', expected a whole number from 1 to 65535"},
       }) {
    Env e(b.world, b.rank, b.addr, b.port);
    expect_message<Error>([&] { env_launch(); }, b.expected);
  }
}

TEST(EnvLaunch, RankZerosBytesReachEveryRank) {
  const int port = free_port();
  constexpr int kRanks = 4;
  std::vector<std::array<std::byte, 128>> ids(kRanks);
  for (size_t i = 0; i < ids[0].size(); ++i) ids[0][i] = static_cast<std::byte>(i * 7 + 1);
  std::vector<std::thread> ranks;
  std::vector<std::string> errors(kRanks);
  // The other ranks start first: they retry until rank 0 listens.
  for (int r = kRanks - 1; r >= 0; --r) {
    ranks.emplace_back([&, r] {
      try {
        share_from_rank0(ids[static_cast<size_t>(r)], {r, kRanks, "127.0.0.1", port}, 20);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
    if (r == kRanks - 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
    EXPECT_EQ(ids[static_cast<size_t>(r)], ids[0]) << "rank " << r;
  }
}

TEST(EnvLaunch, RanksThatNeverMeetTimeOut) {
  std::array<std::byte, 16> id{};
  const int port = free_port();
  const auto start = std::chrono::steady_clock::now();
  // Nobody listens for rank 1.
  expect_message<DistributedError>([&] { share_from_rank0(id, {1, 2, "127.0.0.1", port}, 0.5); }, "rank 1 of 2: could not reach rank 0 (127.0.0.1:" +
                            std::to_string(port) + ") within 0.5 s");
  // Rank 0 of 3 hears from rank 1 only.
  std::thread one([&] {
    std::array<std::byte, 16> mine{};
    try {
      share_from_rank0(mine, {1, 3, "127.0.0.1", port}, 5);
    } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): rank 0's error is tested
    }
  });
  expect_message<DistributedError>([&] { share_from_rank0(id, {0, 3, "127.0.0.1", port}, 1); }, "rank 0 of 3: ranks 2 did not connect to port " + std::to_string(port));
  one.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(EnvLaunch, ARankOfAnotherJobIsRefused) {
  const int port = free_port();
  std::array<std::byte, 16> id{}, other{};
  std::thread stranger([&] {
    try {
      share_from_rank0(other, {1, 3, "localhost", port}, 5);  // thinks the job has 3 ranks
    } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): rank 0's error is tested
    }
  });
  expect_message<DistributedError>([&] { share_from_rank0(id, {0, 2, "127.0.0.1", port}, 5); }, "a process says it is rank 1 of 3, in a job of 2 ranks");
  stranger.join();
}

}  // namespace
}  // namespace mn::dist
