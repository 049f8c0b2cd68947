#include "runtime/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ag::runtime {
namespace {

// Closes the socket when it goes out of scope.
struct Socket {
  explicit Socket(int fd) : fd(fd) {}
  ~Socket() {
    if (fd >= 0) close(fd);
  }
  Socket(const Socket&) = delete;
  int fd;
};

// recv() of exactly `n` bytes within `timeout_s`, or false.
bool ReceiveAll(int fd, void* out, size_t n, int timeout_s) {
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    pollfd wait{fd, POLLIN, 0};
    if (poll(&wait, 1, timeout_s * 1000) <= 0) return false;
    const ssize_t got = recv(fd, p, n, 0);
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

}  // namespace

absl::StatusOr<MasterAddress> ParseMasterAddress(const std::string& master) {
  const size_t colon = master.rfind(':');
  MasterAddress a;
  if (colon == std::string::npos || colon == 0 || !absl::SimpleAtoi(master.substr(colon + 1), &a.port) ||
      a.port <= 0 || a.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--master must be ADDR:PORT, got '", master, "'"));
  }
  a.host = master.substr(0, colon);
  if (a.host.size() > 2 && a.host.front() == '[' && a.host.back() == ']') a.host = a.host.substr(1, a.host.size() - 2);
  return a;
}

absl::Status ServeRendezvous(int port, int clients, int local_ranks, const std::string& blob, int timeout_s,
                             const std::function<void(int port)>& listening) {
  if (blob.size() != kRendezvousBlobBytes) return absl::InvalidArgumentError("rendezvous: the blob has a bad size");
  Socket listener(socket(AF_INET6, SOCK_STREAM, 0));
  if (listener.fd < 0) return absl::InternalError("rendezvous: socket() failed");
  const int yes = 1, no = 0;
  setsockopt(listener.fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  setsockopt(listener.fd, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof(no));
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_port = htons(static_cast<uint16_t>(port));
  addr.sin6_addr = in6addr_any;
  if (bind(listener.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(listener.fd, 64) != 0) {
    return absl::UnavailableError(absl::StrCat("--master: cannot listen on port ", port, ": ", std::strerror(errno)));
  }
  if (listening) {
    socklen_t len = sizeof(addr);
    getsockname(listener.fd, reinterpret_cast<sockaddr*>(&addr), &len);
    listening(ntohs(addr.sin6_port));
  }
  for (int served = 0; served < clients;) {
    pollfd wait{listener.fd, POLLIN, 0};
    if (poll(&wait, 1, timeout_s * 1000) <= 0) {
      return absl::DeadlineExceededError(absl::StrCat("rendezvous: ", served + 1, " of ", clients + 1,
                                                      " nodes arrived within ", timeout_s, " s"));
    }
    Socket client(accept(listener.fd, nullptr, nullptr));
    if (client.fd < 0) continue;
    int32_t theirs = 0;
    if (!ReceiveAll(client.fd, &theirs, sizeof(theirs), timeout_s)) continue;  // not one of ours: ignore it
    if (theirs != local_ranks) {
      return absl::InvalidArgumentError(absl::StrCat("rendezvous: a node runs ", theirs, " ranks, node 0 runs ",
                                                     local_ranks, " (every node must run as many)"));
    }
    if (send(client.fd, blob.data(), blob.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(blob.size())) {
      return absl::UnavailableError("rendezvous: sending to a node failed");
    }
    ++served;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> JoinRendezvous(const MasterAddress& master, int local_ranks, int timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  for (;;) {
    addrinfo hints{}, *found = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(master.host.c_str(), std::to_string(master.port).c_str(), &hints, &found) != 0 ||
        found == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("--master: cannot resolve '", master.host, "'"));
    }
    Socket s(socket(found->ai_family, SOCK_STREAM, 0));
    const bool connected = s.fd >= 0 && connect(s.fd, found->ai_addr, found->ai_addrlen) == 0;
    freeaddrinfo(found);
    if (connected) {
      const int32_t mine = local_ranks;
      std::string blob(kRendezvousBlobBytes, '\0');
      if (send(s.fd, &mine, sizeof(mine), MSG_NOSIGNAL) != sizeof(mine) ||
          !ReceiveAll(s.fd, blob.data(), blob.size(), timeout_s)) {
        return absl::UnavailableError("rendezvous: node 0 refused this node (see node 0's error)");
      }
      return blob;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("rendezvous: node 0 at ", master.host, ":", master.port,
                                                      " did not answer within ", timeout_s, " s"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace ag::runtime
