// The rendezvous of a multi-node run: node 0 listens at --master ADDR:PORT
// and hands a blob (NCCL's unique id, 128 bytes) to every other node over one
// TCP connection each; a node that runs another number of ranks is refused.
// Plain sockets, so it is built and tested on every machine.
#ifndef AUTOGLM_RUNTIME_RENDEZVOUS_H_
#define AUTOGLM_RUNTIME_RENDEZVOUS_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"

namespace ag::runtime {

inline constexpr size_t kRendezvousBlobBytes = 128;

struct MasterAddress {
  std::string host;
  int port = 0;
};

// "ADDR:PORT" ("[v6]:PORT" too) -> address, or an error naming --master.
absl::StatusOr<MasterAddress> ParseMasterAddress(const std::string& master);

// Node 0: accepts `clients` nodes on `port` (every interface), checks that each
// runs `local_ranks` ranks, sends each `blob`. Fails after `timeout_s` seconds
// without a node. `listening` (optional) is told the port once it listens (`port` 0 picks one).
absl::Status ServeRendezvous(int port, int clients, int local_ranks, const std::string& blob, int timeout_s,
                             const std::function<void(int port)>& listening = nullptr);

// Another node: connects to node 0 (retrying until `timeout_s`), says how many
// ranks it runs, receives the blob.
absl::StatusOr<std::string> JoinRendezvous(const MasterAddress& master, int local_ranks, int timeout_s);

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_RENDEZVOUS_H_
