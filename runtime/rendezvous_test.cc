// The multi-node rendezvous over real sockets on this machine: node 0 hands
// its blob to every node; a node with another rank count is refused; nobody
// coming is a deadline error, not a hang; --master is parsed strictly.
#include "runtime/rendezvous.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace ag::runtime {
namespace {

TEST(Rendezvous, MasterAddressIsHostColonPort) {
  absl::StatusOr<MasterAddress> a = ParseMasterAddress("10.0.0.1:29500");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "10.0.0.1");
  EXPECT_EQ(a->port, 29500);
  a = ParseMasterAddress("[::1]:80");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "::1");
  for (const char* bad : {"", "host", ":80", "h:0", "h:70000", "h:abc", "h:-1"}) {
    absl::StatusOr<MasterAddress> b = ParseMasterAddress(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.status().message().find("--master must be ADDR:PORT"), std::string::npos);
  }
}

// Node 0 serving `clients` on a free port; `port` is set once it listens.
struct Node0 {
  Node0(int clients, int ranks, std::string blob)
      : thread([this, clients, ranks, blob] {
          status = ServeRendezvous(0, clients, ranks, blob, 10, [this](int port) { bound.store(port); });
          finished.store(true);
        }) {
    while (bound.load() == 0 && !finished.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  MasterAddress address() const { return {"127.0.0.1", bound.load()}; }
  absl::Status Finish() {
    thread.join();
    return status;
  }
  std::atomic<int> bound{0};
  std::atomic<bool> finished{false};
  absl::Status status;
  std::thread thread;
};

TEST(Rendezvous, EveryNodeGetsNodeZerosBlob) {
  std::string blob(kRendezvousBlobBytes, '\0');
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<char>(i * 7 + 1);
  Node0 node0(3, 4, blob);
  std::vector<absl::StatusOr<std::string>> got(3, absl::UnknownError("not run"));
  std::vector<std::thread> nodes;
  for (int n = 0; n < 3; ++n) nodes.emplace_back([&, n] { got[n] = JoinRendezvous(node0.address(), 4, 10); });
  for (std::thread& t : nodes) t.join();
  ASSERT_TRUE(node0.Finish().ok());
  for (const auto& g : got) {
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(*g, blob);
  }
}

TEST(Rendezvous, ANodeWithAnotherRankCountIsRefusedOnBothSides) {
  Node0 node0(1, 2, std::string(kRendezvousBlobBytes, 'x'));
  absl::StatusOr<std::string> joined = JoinRendezvous(node0.address(), 3, 10);
  const absl::Status served = node0.Finish();
  ASSERT_FALSE(served.ok());
  EXPECT_NE(served.message().find("a node runs 3 ranks, node 0 runs 2"), std::string::npos) << served;
  ASSERT_FALSE(joined.ok());
  EXPECT_NE(joined.status().message().find("refused"), std::string::npos) << joined.status();
}

TEST(Rendezvous, NobodyComingIsADeadlineNotAHang) {
  int port = 0;
  const absl::Status served =
      ServeRendezvous(0, 1, 1, std::string(kRendezvousBlobBytes, 'x'), 1, [&port](int p) { port = p; });
  EXPECT_TRUE(absl::IsDeadlineExceeded(served)) << served;
  ASSERT_GT(port, 0);
  // Nobody listens on that port any more: the joining node gives up too.
  absl::StatusOr<std::string> joined = JoinRendezvous({"127.0.0.1", port}, 1, 1);
  EXPECT_TRUE(absl::IsDeadlineExceeded(joined.status())) << joined.status();
}

}  // namespace
}  // namespace ag::runtime
