// A small HTTP/1.1 server on Boost.Beast: a fixed pool of I/O threads runs
// every connection asynchronously (thousands of open streams cost no thread
// each), with limits on header and body sizes, on how long a client may take
// to send a request and on the bytes queued for a client that does not read.
// Responses are whole bodies or streams (server-sent events: chunked for
// HTTP/1.1, close-delimited for HTTP/1.0), written from any thread; HEAD
// requests get the headers alone. A client that half-closes its side after a
// complete request is still answered.
#ifndef AUTOGLM_SERVE_HTTP_SERVER_H_
#define AUTOGLM_SERVE_HTTP_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace ag::serve {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and query
  std::string body;
  std::string authorization;  // the Authorization header, or empty
};

using Headers = std::vector<std::pair<std::string, std::string>>;

// One request's answer, shared by the handler and whatever thread produces
// it. Every call is thread-safe and returns at once (writes are queued).
class Responder {
 public:
  virtual ~Responder() = default;
  // A whole response. Only the first Respond or StartStream counts.
  virtual void Respond(int status, const std::string& content_type, std::string body, Headers headers = {}) = 0;
  // A chunked response; then Write any number of times and End once.
  virtual void StartStream(int status, const std::string& content_type) = 0;
  // False once the client has gone, or has left more than
  // HttpLimits::max_queued_bytes unread (then it is dropped as if it had
  // gone): the caller should stop producing.
  virtual bool Write(std::string chunk) = 0;
  virtual void End() = 0;
  // Called once, from an I/O thread, if the client goes away before the response is complete.
  virtual void OnDisconnect(std::function<void()> callback) = 0;
};

using HttpHandler = std::function<void(HttpRequest, std::shared_ptr<Responder>)>;

struct HttpLimits {
  size_t max_header_bytes = 16 * 1024;
  size_t max_body_bytes = 8 * 1024 * 1024;  // larger: 413
  int read_timeout_seconds = 30;            // a request must arrive within this: else 408
  int threads = 4;                          // I/O threads
  size_t max_queued_bytes = 4 * 1024 * 1024;  // a stream's unsent bytes per connection; more: dropped
  // The kernel's send buffer per connection, fixed: left to autotuning it grows to
  // megabytes for a client that does not read, outside the bound above.
  int socket_send_buffer_bytes = 256 * 1024;
};

class HttpServer {
 public:
  // Listens on host:port (port 0: any free port) and starts the I/O threads.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& host, int port, HttpLimits limits,
                                                           HttpHandler handler);
  virtual ~HttpServer() = default;
  virtual int port() const = 0;
  // Stops accepting connections; open ones continue.
  virtual void StopAccepting() = 0;
  // Connections open now.
  virtual int64_t open_connections() const = 0;
  // Waits until every request handed to the handler has its whole response
  // written (or its connection closed), or `seconds` pass; true if all were.
  virtual bool WaitForResponses(double seconds) = 0;
  // Closes everything and joins the I/O threads.
  virtual void Stop() = 0;
};

}  // namespace ag::serve

#endif  // AUTOGLM_SERVE_HTTP_SERVER_H_
