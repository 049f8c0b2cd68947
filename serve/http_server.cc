#include "serve/http_server.h"

#include <sys/socket.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <deque>
#include <optional>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ag::serve {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using boost::system::error_code;

std::string Serialize(int status, const std::string& content_type, std::string body, const Headers& headers,
                      bool keep_alive) {
  http::response<http::string_body> res{static_cast<http::status>(status), 11};
  res.set(http::field::server, "autoglm");
  res.set(http::field::content_type, content_type);
  for (const auto& [name, value] : headers) res.set(name, value);
  res.keep_alive(keep_alive);
  res.body() = std::move(body);
  res.prepare_payload();
  std::ostringstream out;
  out << res;
  return out.str();
}

std::string ErrorBody(const std::string& message, const std::string& type) {
  return absl::StrCat(R"({"error": {"message": ")", message, R"(", "type": ")", type,
                      R"(", "param": null, "code": null}})");
}

class Server;

// One connection: requests one after another (keep-alive), each answered
// through a Responder. Everything below runs on the connection's strand.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, const HttpLimits& limits, const HttpHandler& handler, std::atomic<int64_t>& open)
      : stream_(std::move(socket)), read_timer_(stream_.get_executor()), limits_(limits), handler_(handler), open_(open) {
    ++open_;
  }
  ~Session() { --open_; }

  void Start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->Read(); });
  }

  // ---- the Responder side, from any thread ----
  void Post(uint64_t exchange, std::function<void(Session&)> f) {
    net::post(stream_.get_executor(), [self = shared_from_this(), exchange, f = std::move(f)] {
      if (self->exchange_ == exchange && !self->complete_) f(*self);
    });
  }
  bool closed() const { return closed_flag_.load(); }

  void Respond(int status, const std::string& content_type, std::string body, const Headers& headers) {
    if (started_) return;
    started_ = true;
    complete_ = true;
    Enqueue(Serialize(status, content_type, std::move(body), headers, keep_alive_));
  }
  void StartStream(int status, const std::string& content_type) {
    if (started_) return;
    started_ = true;
    streaming_ = true;
    http::response<http::empty_body> res{static_cast<http::status>(status), 11};
    res.set(http::field::server, "autoglm");
    res.set(http::field::content_type, content_type);
    res.set(http::field::cache_control, "no-cache");
    res.chunked(true);
    res.keep_alive(keep_alive_);
    std::ostringstream out;
    out << res.base();
    Enqueue(out.str());
  }
  void WriteChunk(std::string chunk) {
    if (!streaming_ || chunk.empty()) return;
    Enqueue(absl::StrCat(absl::Hex(chunk.size()), "\r\n", chunk, "\r\n"));
  }
  void End() {
    if (!streaming_) return;
    complete_ = true;
    Enqueue("0\r\n\r\n");
  }
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
    ++exchange_;
    started_ = streaming_ = complete_ = false;
    on_disconnect_ = nullptr;
    HttpRequest request;
    request.method = std::string(req.method_string());
    request.target = std::string(req.target());
    request.body = std::move(req.body());
    if (auto it = req.find(http::field::authorization); it != req.end()) request.authorization = std::string(it->value());
    WatchForDisconnect();
    handler_(request, MakeResponder());
  }

  std::shared_ptr<Responder> MakeResponder();

  // A client that closes its connection while its answer is being produced:
  // the socket becomes readable with nothing to read.
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
                                  if (ec || peek_ec == net::error::eof || (!peek_ec && n == 0) ||
                                      (peek_ec && peek_ec != net::error::would_block)) {
                                    self->Disconnected();
                                  }
                                });
  }

  void Refuse(int status, const std::string& message) {
    keep_alive_ = false;
    ++exchange_;
    started_ = true;
    complete_ = true;
    Enqueue(Serialize(status, "application/json", ErrorBody(message, "invalid_request_error"), {}, false));
  }

  void Enqueue(std::string bytes) {
    if (closed_) return;
    queue_.push_back(std::move(bytes));
    if (!writing_) WriteNext();
  }
  void WriteNext() {
    writing_ = true;
    stream_.expires_after(std::chrono::seconds(60));  // a client that stops reading is dropped
    net::async_write(stream_, net::buffer(queue_.front()),
                     [self = shared_from_this()](error_code ec, size_t) { self->OnWrite(ec); });
  }
  void OnWrite(error_code ec) {
    writing_ = false;
    if (closed_) {
      queue_.clear();
      return;
    }
    if (ec) return Disconnected();
    queue_.pop_front();
    if (!queue_.empty()) return WriteNext();
    stream_.expires_never();
    if (!complete_) return;
    if (keep_alive_) return Read();
    Linger();
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
    if (!writing_) queue_.clear();  // a write in flight still reads its buffer (OnWrite drops the rest)
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
  std::atomic<int64_t>& open_;
  std::deque<std::string> queue_;
  char drain_[16384];
  std::function<void()> on_disconnect_;
  uint64_t exchange_ = 0;
  bool keep_alive_ = false, started_ = false, streaming_ = false, complete_ = false;
  bool writing_ = false, closed_ = false;
  std::atomic<bool> closed_flag_{false};
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
    session_->Post(exchange_, [chunk = std::move(chunk)](Session& s) mutable { s.WriteChunk(std::move(chunk)); });
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
      : limits_(limits), handler_(std::move(handler)), acceptor_(net::make_strand(ioc_)) {}
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
    for (int i = 0; i < std::max(1, limits_.threads); ++i) threads_.emplace_back([this] { ioc_.run(); });
    return absl::OkStatus();
  }
  int port() const override { return port_; }
  int64_t open_connections() const override { return open_.load(); }
  void StopAccepting() override {
    net::post(acceptor_.get_executor(), [this] {
      error_code ignored;
      acceptor_.close(ignored);
    });
  }
  void Stop() override {
    if (stopped_.exchange(true)) return;
    ioc_.stop();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

 private:
  void Accept() {
    acceptor_.async_accept(net::make_strand(ioc_), [this](error_code ec, tcp::socket socket) {
      if (!acceptor_.is_open()) return;
      if (!ec) std::make_shared<Session>(std::move(socket), limits_, handler_, open_)->Start();
      Accept();
    });
  }

  HttpLimits limits_;
  HttpHandler handler_;
  net::io_context ioc_;
  tcp::acceptor acceptor_;
  std::vector<std::thread> threads_;
  std::atomic<int64_t> open_{0};
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
