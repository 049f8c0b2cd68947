#include "serve/http_server.h"

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <deque>
#include <future>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ag::serve {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using boost::system::error_code;

// A whole response; for a HEAD request the headers alone (with the Content-Length the body would have).
std::string Serialize(int status, const std::string& content_type, std::string body, const Headers& headers,
                      bool keep_alive, bool head = false) {
  http::response<http::string_body> res{static_cast<http::status>(status), 11};
  res.set(http::field::server, "autoglm");
  res.set(http::field::content_type, content_type);
  for (const auto& [name, value] : headers) res.set(name, value);
  res.keep_alive(keep_alive);
  res.body() = std::move(body);
  res.prepare_payload();
  std::ostringstream out;
  if (head) {
    out << res.base();
  } else {
    out << res;
  }
  return out.str();
}

std::string ErrorBody(const std::string& message, const std::string& type) {
  return absl::StrCat(R"({"error": {"message": ")", message, R"(", "type": ")", type,
                      R"(", "param": null, "code": null}})");
}

class Server;

// The server's counts that sessions keep up to date.
struct Counts {
  std::atomic<int64_t> open{0};        // connections
  std::atomic<int64_t> unanswered{0};  // requests handed to the handler whose response is not written yet
};

// One connection: requests one after another (keep-alive), each answered
// through a Responder. Everything below runs on the connection's strand,
// except the atomics that Responder::Write reads from other threads.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, const HttpLimits& limits, const HttpHandler& handler, Counts& counts)
      : stream_(std::move(socket)), read_timer_(stream_.get_executor()), limits_(limits), handler_(handler),
        counts_(counts) {
    ++counts_.open;
  }
  ~Session() {
    FinishExchange();
    --counts_.open;
  }

  void Start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->Read(); });
  }
  // A connection taken from the backlog as the server stops accepting: its request may still be on
  // its way, and closing it unread would reset the client. Counted as unanswered from now, so
  // WaitForResponses waits for its (refusing) answer or its end.
  // Counted here, on the accepting thread, before StopAccepting returns: the shutdown's
  // WaitForResponses must not find the count at zero before the strand has run.
  void StartOwed() {
    OpenExchange();
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->Read(); });
  }

  // ---- the Responder side, from any thread ----
  // Runs f on the strand if the exchange is still the current one and not complete; else `dropped`.
  void Post(uint64_t exchange, std::function<void(Session&)> f, std::function<void(Session&)> dropped = nullptr) {
    net::post(stream_.get_executor(), [self = shared_from_this(), exchange, f = std::move(f), dropped = std::move(dropped)] {
      if (self->exchange_ == exchange && !self->complete_) {
        f(*self);
      } else if (dropped) {
        dropped(*self);
      }
    });
  }
  const HttpLimits& limits() const { return limits_; }
  bool closed() const { return closed_flag_.load(); }
  // Stream bytes accepted by Write and not yet written to the socket.
  std::atomic<size_t>& unsent() { return unsent_; }

  void Respond(int status, const std::string& content_type, std::string body, const Headers& headers) {
    if (started_) return;
    started_ = true;
    complete_ = true;
    Enqueue(Serialize(status, content_type, std::move(body), headers, keep_alive_, head_));
  }
  void StartStream(int status, const std::string& content_type) {
    if (started_) return;
    started_ = true;
    streaming_ = true;
    http::response<http::empty_body> res{static_cast<http::status>(status), 11};
    res.set(http::field::server, "autoglm");
    res.set(http::field::content_type, content_type);
    res.set(http::field::cache_control, "no-cache");
    // An HTTP/1.0 client knows no chunked encoding: its stream ends when the connection closes.
    close_delimited_ = http10_;
    if (close_delimited_) keep_alive_ = false;
    res.chunked(!close_delimited_);
    res.keep_alive(keep_alive_);
    std::ostringstream out;
    out << res.base();
    Enqueue(out.str());
  }
  // `counted`: the bytes Write added to unsent() for this chunk.
  void WriteChunk(std::string chunk, size_t counted) {
    if (!streaming_ || chunk.empty()) {
      unsent_ -= counted;
      return;
    }
    if (close_delimited_) return Enqueue(std::move(chunk), counted);
    Enqueue(absl::StrCat(absl::Hex(chunk.size()), "\r\n", chunk, "\r\n"), counted);
  }
  void End() {
    if (!streaming_) return;
    complete_ = true;
    if (!close_delimited_) return Enqueue("0\r\n\r\n");
    if (!writing_ && queue_.empty()) AfterWrites();
  }
  // A client that reads slower than its stream is produced: dropped as if it had gone.
  void DropSlowConsumer() { Disconnected(); }
  void SetDisconnect(std::function<void()> callback) {
    if (closed_) {
      callback();
      return;
    }
    on_disconnect_ = std::move(callback);
  }
  uint64_t exchange() const { return exchange_; }

 private:
  void Read() {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(limits_.max_header_bytes));
    parser_->body_limit(limits_.max_body_bytes);
    // Our own timer, not the stream's: an expired tcp_stream closes the socket, and a slow client
    // is owed its 408.
    timed_out_ = false;
    read_timer_.expires_after(std::chrono::seconds(limits_.read_timeout_seconds));
    read_timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (ec) return;  // cancelled: the request arrived
      self->timed_out_ = true;
      error_code ignored;
      self->stream_.socket().cancel(ignored);
    });
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](error_code ec, size_t) { self->OnRead(ec); });
  }

  void OnRead(error_code ec) {
    read_timer_.cancel();
    if (ec) {
      const bool partial = parser_->got_some();
      if (timed_out_) {
        if (partial) return Refuse(408, "the request took too long to arrive");
        return Close();  // an idle keep-alive connection
      }
      if (ec == http::error::body_limit) {
        return Refuse(413, "the request body is larger than " + std::to_string(limits_.max_body_bytes) + " bytes");
      }
      if (ec == http::error::header_limit) return Refuse(431, "the request headers are too large");
      if (partial && ec != http::error::end_of_stream && ec != net::error::eof &&
          ec != net::error::connection_reset) {
        return Refuse(400, "malformed HTTP request: " + ec.message());
      }
      return Close();
    }
    stream_.expires_never();
    http::request<http::string_body> req = parser_->release();
    keep_alive_ = req.keep_alive();
    http10_ = req.version() < 11;
    head_ = req.method() == http::verb::head;
    ++exchange_;
    started_ = streaming_ = complete_ = close_delimited_ = false;
    on_disconnect_ = nullptr;
    OpenExchange();
    HttpRequest request;
    request.method = std::string(req.method_string());
    request.target = std::string(req.target());
    request.body = std::move(req.body());
    if (auto it = req.find(http::field::authorization); it != req.end()) request.authorization = std::string(it->value());
    WatchForDisconnect();
    handler_(std::move(request), MakeResponder());
  }

  std::shared_ptr<Responder> MakeResponder();

  // A client that goes away while its answer is being produced: the socket
  // becomes readable with an error (a reset). A plain end of stream is only
  // a half-close (the client may still read its answer), so it is not taken
  // as a disconnect; a client that has really gone fails the next write.
  void WatchForDisconnect() {
    if (buffer_.size() > 0) return;  // a pipelined request is already here
    stream_.socket().async_wait(tcp::socket::wait_read,
                                [self = shared_from_this(), exchange = exchange_](error_code ec) {
                                  if (self->exchange_ != exchange || self->complete_ || self->closed_) return;
                                  char byte;
                                  error_code peek_ec;
                                  self->stream_.socket().non_blocking(true);
                                  const size_t n =
                                      self->stream_.socket().receive(net::buffer(&byte, 1), MSG_PEEK, peek_ec);
                                  self->stream_.socket().non_blocking(false);
                                  const bool end_of_stream = peek_ec == net::error::eof || (!peek_ec && n == 0);
                                  if (end_of_stream) return;  // half-closed: answer anyway
                                  if (!ec && peek_ec == net::error::would_block) return self->WatchForDisconnect();  // spurious
                                  if (ec || peek_ec) self->Disconnected();
                                });
  }

  void Refuse(int status, const std::string& message) {
    keep_alive_ = false;
    ++exchange_;
    started_ = true;
    complete_ = true;
    Enqueue(Serialize(status, "application/json", ErrorBody(message, "invalid_request_error"), {}, false));
  }

  void Enqueue(std::string bytes, size_t counted = 0) {
    if (closed_) {
      unsent_ -= counted;
      return;
    }
    queue_.push_back({std::move(bytes), counted});
    if (!writing_) WriteNext();
  }
  void WriteNext() {
    writing_ = true;
    stream_.expires_after(std::chrono::seconds(60));  // a client that stops reading is dropped
    net::async_write(stream_, net::buffer(queue_.front().bytes),
                     [self = shared_from_this()](error_code ec, size_t) { self->OnWrite(ec); });
  }
  void OnWrite(error_code ec) {
    writing_ = false;
    if (closed_) {
      ClearQueue();
      return;
    }
    if (ec) return Disconnected();
    unsent_ -= queue_.front().counted;
    queue_.pop_front();
    if (!queue_.empty()) return WriteNext();
    AfterWrites();
  }
  // Everything queued is written: the next request, or the end of the connection.
  void AfterWrites() {
    stream_.expires_never();
    if (!complete_) return;
    FinishExchange();
    if (keep_alive_) return Read();
    Linger();
  }
  void OpenExchange() {
    if (!std::exchange(exchange_open_, true)) ++counts_.unanswered;
  }
  void FinishExchange() {
    if (std::exchange(exchange_open_, false)) --counts_.unanswered;
  }
  void ClearQueue() {
    for (const Pending& p : queue_) unsent_ -= p.counted;
    queue_.clear();
  }
  // Ends a connection whose client may still be sending (a refused body): closing with unread bytes
  // would reset the connection and could destroy the answer in flight, so stop sending, read and
  // drop what still comes for a moment, then close.
  void Linger() {
    error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(std::chrono::seconds(2));
    DrainUntilClosed();
  }
  void DrainUntilClosed() {
    stream_.async_read_some(net::buffer(drain_), [self = shared_from_this()](error_code ec, size_t) {
      if (ec) return self->Close();
      self->DrainUntilClosed();
    });
  }
  void Disconnected() {
    if (closed_) return;
    if (!complete_ && on_disconnect_) {
      auto callback = std::move(on_disconnect_);
      on_disconnect_ = nullptr;
      callback();
    }
    Close();
  }
  void Close() {
    closed_ = true;
    closed_flag_ = true;
    FinishExchange();
    if (!writing_) ClearQueue();  // a write in flight still reads its buffer (OnWrite drops the rest)
    error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

  beast::tcp_stream stream_;
  net::steady_timer read_timer_;
  bool timed_out_ = false;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  const HttpLimits& limits_;
  const HttpHandler& handler_;
  Counts& counts_;
  struct Pending {
    std::string bytes;
    size_t counted;  // of unsent_
  };
  std::deque<Pending> queue_;
  char drain_[16384];
  std::function<void()> on_disconnect_;
  uint64_t exchange_ = 0;
  bool keep_alive_ = false, started_ = false, streaming_ = false, complete_ = false;
  bool http10_ = false, head_ = false, close_delimited_ = false;
  bool exchange_open_ = false;  // counted in counts_.unanswered
  bool writing_ = false, closed_ = false;
  std::atomic<bool> closed_flag_{false};
  std::atomic<size_t> unsent_{0};
};

class SessionResponder : public Responder {
 public:
  SessionResponder(std::shared_ptr<Session> session, uint64_t exchange)
      : session_(std::move(session)), exchange_(exchange) {}
  void Respond(int status, const std::string& content_type, std::string body, Headers headers) override {
    session_->Post(exchange_, [status, content_type, body = std::move(body), headers = std::move(headers)](
                                  Session& s) mutable { s.Respond(status, content_type, std::move(body), headers); });
  }
  void StartStream(int status, const std::string& content_type) override {
    session_->Post(exchange_, [status, content_type](Session& s) { s.StartStream(status, content_type); });
  }
  bool Write(std::string chunk) override {
    if (session_->closed()) return false;
    if (session_->unsent().load() > session_->limits().max_queued_bytes) {
      session_->Post(exchange_, [](Session& s) { s.DropSlowConsumer(); });
      return false;
    }
    const size_t n = chunk.size();
    session_->unsent() += n;
    session_->Post(
        exchange_, [chunk = std::move(chunk), n](Session& s) mutable { s.WriteChunk(std::move(chunk), n); },
        [n](Session& s) { s.unsent() -= n; });  // the exchange ended: nobody writes it
    return true;
  }
  void End() override {
    session_->Post(exchange_, [](Session& s) { s.End(); });
  }
  void OnDisconnect(std::function<void()> callback) override {
    session_->Post(exchange_, [callback = std::move(callback)](Session& s) mutable { s.SetDisconnect(std::move(callback)); });
  }

 private:
  std::shared_ptr<Session> session_;
  uint64_t exchange_;
};

std::shared_ptr<Responder> Session::MakeResponder() {
  return std::make_shared<SessionResponder>(shared_from_this(), exchange_);
}

class Server : public HttpServer {
 public:
  Server(HttpLimits limits, HttpHandler handler)
      : limits_(limits), handler_(std::move(handler)), acceptor_(net::make_strand(ioc_)),
        backoff_timer_(acceptor_.get_executor()) {}
  ~Server() override { Stop(); }

  absl::Status Listen(const std::string& host, int port) {
    error_code ec;
    const net::ip::address address = net::ip::make_address(host, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("--host: '", host, "' is not an IP address"));
    const tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) return absl::UnavailableError(absl::StrCat("cannot listen on ", host, ":", port, ": ", ec.message()));
    port_ = acceptor_.local_endpoint().port();
    Accept();
    // Answers are posted from other threads (the engine's, the workers'): the I/O threads must
    // not run out of work and return while a connection has no operation pending (one whose
    // answer is still being produced, after the acceptor closed).
    work_.emplace(net::make_work_guard(ioc_));
    for (int i = 0; i < std::max(1, limits_.threads); ++i) threads_.emplace_back([this] { ioc_.run(); });
    return absl::OkStatus();
  }
  int port() const override { return port_; }
  int64_t open_connections() const override { return counts_.open.load(); }
  bool WaitForResponses(double seconds) override {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (counts_.unanswered.load() > 0) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }
  // Connections the kernel completed but nobody accepted yet would be reset by closing the
  // acceptor, though their clients connected before the signal: they are taken in first and
  // answered like any other (the handler refuses them with a 503 once admission stops).
  // Returns once that is done (or after a second, should the I/O threads be stuck), so what
  // follows (WaitForResponses) counts the connections taken in.
  void StopAccepting() override {
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> finished = done->get_future();
    net::post(acceptor_.get_executor(), [this, done] {
      error_code ec;
      acceptor_.cancel(ec);  // the pending async_accept's handler sees a closed acceptor and returns
      acceptor_.non_blocking(true, ec);
      while (!ec) {
        tcp::socket socket(net::make_strand(ioc_));
        acceptor_.accept(socket, ec);
        if (!ec) StartSession(std::move(socket), /*owed=*/true);
      }
      acceptor_.close(ec);
      backoff_timer_.cancel();
      // The cancelled accept's handler is queued on this strand by now: done after it has run.
      net::post(acceptor_.get_executor(), [done] { done->set_value(); });
    });
    finished.wait_for(std::chrono::seconds(1));
  }
  void Stop() override {
    if (stopped_.exchange(true)) return;
    work_.reset();
    ioc_.stop();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

 private:
  void Accept() {
    acceptor_.async_accept(net::make_strand(ioc_), [this](error_code ec, tcp::socket socket) {
      if (!acceptor_.is_open()) {
        // Accepted as StopAccepting cancelled the operation: answered like the backlog's connections.
        if (!ec) StartSession(std::move(socket), /*owed=*/true);
        return;
      }
      if (!ec) {
        backoff_ms_ = 0;
        StartSession(std::move(socket), /*owed=*/false);
        return Accept();
      }
      // Out of descriptors (or memory): retrying at once would spin a core until connections close.
      // Wait, longer each time up to a second, and say so once per episode.
      if (backoff_ms_ == 0) {
        std::fprintf(stderr, "http server: accept failed (%s); backing off until it succeeds\n", ec.message().c_str());
      }
      backoff_ms_ = std::clamp(backoff_ms_ * 2, 5, 1000);
      backoff_timer_.expires_after(std::chrono::milliseconds(backoff_ms_));
      backoff_timer_.async_wait([this](error_code timer_ec) {
        if (!timer_ec) Accept();
      });
    });
  }

  void StartSession(tcp::socket socket, bool owed) {
    error_code ignored;
    socket.set_option(net::socket_base::send_buffer_size(limits_.socket_send_buffer_bytes), ignored);
    auto session = std::make_shared<Session>(std::move(socket), limits_, handler_, counts_);
    owed ? session->StartOwed() : session->Start();
  }

  HttpLimits limits_;
  HttpHandler handler_;
  net::io_context ioc_;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work_;
  tcp::acceptor acceptor_;
  net::steady_timer backoff_timer_;
  int backoff_ms_ = 0;  // on the acceptor's strand
  std::vector<std::thread> threads_;
  Counts counts_;
  std::atomic<bool> stopped_{false};
  int port_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& host, int port, HttpLimits limits,
                                                              HttpHandler handler) {
  if (port < 0 || port > 65535) return absl::InvalidArgumentError(absl::StrCat("--port: ", port, " is not a port"));
  auto server = std::make_unique<Server>(limits, std::move(handler));
  if (absl::Status s = server->Listen(host, port); !s.ok()) return s;
  return server;
}

}  // namespace ag::serve
