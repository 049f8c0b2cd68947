#include "serve/http_fetch.h"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/golden.h"

namespace ag::serve {
namespace {

namespace asio = boost::asio;
namespace ssl = asio::ssl;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using ::testing::HasSubstr;

// What the loopback server does with one request: wait, then send `bytes` in
// pieces of `piece` bytes with `gap` between them (a trickle when small).
struct Reply {
  std::string bytes;
  std::chrono::milliseconds wait{0};
  size_t piece = 1 << 20;
  std::chrono::milliseconds gap{0};
};

std::string Ok(const std::string& body) {
  return absl::StrCat("HTTP/1.1 200 OK\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}

// A one-thread HTTP(S) server on a loopback address, one connection at a time.
// Its waits end early when the test is over, so a stalled reply cannot hold it.
class LoopbackServer {
 public:
  LoopbackServer(std::function<Reply(const std::string& target)> reply, bool tls = false,
                 const std::string& address = "127.0.0.1")
      : reply_(std::move(reply)), tls_(tls), acceptor_(io_, tcp::endpoint(asio::ip::make_address(address), 0)) {
    if (tls_) {
      const std::string dir = testing::TestDataDir() + "/tls/";
      context_.use_certificate_chain_file(dir + "localhost.crt");
      context_.use_private_key_file(dir + "localhost.key", ssl::context::pem);
    }
    thread_ = std::thread([this] { Serve(); });
  }
  ~LoopbackServer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    beast::error_code ec;
    tcp::socket poke(io_);
    poke.connect(acceptor_.local_endpoint(), ec);  // ends the blocking accept
    thread_.join();
  }
  int port() const { return acceptor_.local_endpoint().port(); }

 private:
  bool Sleep(std::chrono::milliseconds d) {  // false: the test is over
    std::unique_lock<std::mutex> lock(mu_);
    return !wake_.wait_for(lock, d, [this] { return stopping_; });
  }
  template <class Stream>
  void Answer(Stream& stream) {
    beast::error_code ec;
    beast::flat_buffer buffer;
    http::request<http::empty_body> request;
    http::read(stream, buffer, request, ec);
    if (ec) return;
    // "/host" answers the Host header the client sent; every other target, what the test says.
    const Reply r = request.target() == "/host" ? Reply{Ok(std::string(request[http::field::host]))}
                                                : reply_(std::string(request.target()));
    if (!Sleep(r.wait)) return;
    for (size_t at = 0; at < r.bytes.size(); at += r.piece) {
      asio::write(stream, asio::buffer(r.bytes.data() + at, std::min(r.piece, r.bytes.size() - at)), ec);
      if (ec || !Sleep(r.gap)) return;
    }
  }
  void Serve() {
    for (;;) {
      tcp::socket socket(io_);
      beast::error_code ec;
      acceptor_.accept(socket, ec);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
      }
      if (ec) continue;
      if (!tls_) {
        Answer(socket);
        continue;
      }
      ssl::stream<tcp::socket> stream(std::move(socket), context_);
      stream.handshake(ssl::stream_base::server, ec);
      if (!ec) Answer(stream);
    }
  }

  std::function<Reply(const std::string&)> reply_;
  bool tls_;
  asio::io_context io_;
  ssl::context context_{ssl::context::tls_server};
  tcp::acceptor acceptor_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

FetchLimits Limits(int timeout_ms = 5000, int64_t max_bytes = 1 << 20) {
  FetchLimits limits;
  limits.timeout_ms = timeout_ms;
  limits.max_bytes = max_bytes;
  return limits;
}

TEST(ParseHttpUrl, TakesHostPortAndTarget) {
  absl::StatusOr<HttpUrl> u = ParseHttpUrl("HTTPS://example.com/a/b.png?x=1#frag");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_TRUE(u->tls);
  EXPECT_EQ(u->host, "example.com");
  EXPECT_EQ(u->port, "443");
  EXPECT_EQ(u->target, "/a/b.png?x=1");
  u = ParseHttpUrl("http://[::1]:8081?q");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, "8081");
  EXPECT_EQ(u->target, "/?q");
  u = ParseHttpUrl("http://h");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->port, "80");
  EXPECT_EQ(u->target, "/");
}

TEST(ParseHttpUrl, RefusesWhatItCannotFetch) {
  for (const char* url : {"ftp://h/x", "http://", "http://:80/x", "http://h:0/", "http://h:99999/", "http://h:8a/",
                          "http://user:pw@h/x", "http://[::1/x", "http://[::1]x/"}) {
    EXPECT_FALSE(ParseHttpUrl(url).ok()) << url;
  }
}

TEST(HttpGet, ReturnsTheBodyOfA200) {
  LoopbackServer server([](const std::string& target) { return Reply{Ok("image bytes for " + target)}; });
  absl::StatusOr<std::string> body = HttpGet(absl::StrCat("http://127.0.0.1:", server.port(), "/a.png?v=2"), Limits());
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, "image bytes for /a.png?v=2");
  body = HttpGet(absl::StrCat("http://localhost:", server.port(), "/host"), Limits());
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, absl::StrCat("localhost:", server.port())) << "the port unless it is the scheme's default";
}

TEST(HttpGet, RefusesOtherStatusesAndLargeBodies) {
  LoopbackServer server([](const std::string& target) {
    if (target == "/missing") return Reply{"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"};
    if (target == "/chunked") {  // two chunks of 3,000 bytes: no length up front
      const std::string chunk = "bb8\r\n" + std::string(3000, 'y') + "\r\n";
      return Reply{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk + chunk + "0\r\n\r\n"};
    }
    return Reply{Ok(std::string(4096, 'x'))};
  });
  const std::string base = absl::StrCat("http://127.0.0.1:", server.port());
  absl::StatusOr<std::string> r = HttpGet(base + "/missing", Limits());
  EXPECT_THAT(r.status().message(), HasSubstr("answered HTTP 404"));
  r = HttpGet(base + "/big", Limits(5000, 4095));
  EXPECT_THAT(r.status().message(), HasSubstr("larger than 4095 bytes"));
  r = HttpGet(base + "/big", Limits(5000, 4096));
  EXPECT_TRUE(r.ok()) << r.status();
  r = HttpGet(base + "/chunked", Limits(5000, 5999));
  EXPECT_THAT(r.status().message(), HasSubstr("larger than 5999 bytes"));
  r = HttpGet(base + "/chunked", Limits(5000, 6000));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, std::string(6000, 'y'));
}

// The deadline covers the whole exchange: a server that never answers, and one
// that answers a byte at a time, each cost the limit, not the limit per read.
TEST(HttpGet, EndsAStalledOrTricklingExchangeAtTheDeadline) {
  LoopbackServer server([](const std::string& target) {
    if (target == "/stall") return Reply{Ok("late"), std::chrono::milliseconds(30000)};
    return Reply{Ok(std::string(200, 'x')), std::chrono::milliseconds(0), 1, std::chrono::milliseconds(20)};
  });
  for (const char* path : {"/stall", "/trickle"}) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::string> r = HttpGet(absl::StrCat("http://127.0.0.1:", server.port(), path), Limits(400));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_THAT(r.status().message(), HasSubstr("took more than 0.4 s")) << path;
    EXPECT_LT(seconds, 3.0) << path;
  }
}

TEST(HttpGet, FollowsRedirectsToHttpOnlyAndNotForever) {
  LoopbackServer server([](const std::string& target) {
    auto to = [](const std::string& where) {
      return Reply{absl::StrCat("HTTP/1.1 302 Found\r\nLocation: ", where, "\r\nContent-Length: 0\r\n\r\n")};
    };
    if (target == "/a/first") return to("second");    // relative to /a/
    if (target == "/a/second") return to("/final");  // absolute path
    if (target == "/loop") return to("/loop");
    if (target == "/file") return to("file:///etc/passwd");
    return Reply{Ok("arrived at " + target)};
  });
  const std::string base = absl::StrCat("http://127.0.0.1:", server.port());
  absl::StatusOr<std::string> r = HttpGet(base + "/a/first", Limits());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "arrived at /final");
  EXPECT_THAT(HttpGet(base + "/loop", Limits()).status().message(), HasSubstr("redirected more than 5 times"));
  EXPECT_THAT(HttpGet(base + "/file", Limits()).status().message(), HasSubstr("other than http(s)"));
}

TEST(HttpGet, SaysWhenItCannotConnect) {
  int port = 0;
  {
    LoopbackServer closed([](const std::string&) { return Reply{}; });
    port = closed.port();
  }
  absl::StatusOr<std::string> r = HttpGet(absl::StrCat("http://127.0.0.1:", port, "/x"), Limits());
  EXPECT_THAT(r.status().message(), HasSubstr(absl::StrCat("cannot connect to 127.0.0.1:", port)));
}

// HTTPS against the test's own certificate: trusted only through SSL_CERT_FILE,
// and only for the names it carries (localhost, 127.0.0.1).
class HttpsGet : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* old = std::getenv("SSL_CERT_FILE");
    saved_ = old ? old : "";
    had_ = old != nullptr;
  }
  void TearDown() override {
    if (had_) {
      setenv("SSL_CERT_FILE", saved_.c_str(), 1);
    } else {
      unsetenv("SSL_CERT_FILE");
    }
  }
  static void Trust() { setenv("SSL_CERT_FILE", (testing::TestDataDir() + "/tls/localhost.crt").c_str(), 1); }
  std::string saved_;
  bool had_ = false;
};

TEST_F(HttpsGet, FetchesFromATrustedServerByNameOrAddress) {
  Trust();
  LoopbackServer server([](const std::string& target) { return Reply{Ok("secret " + target)}; }, /*tls=*/true);
  for (const char* host : {"localhost", "127.0.0.1"}) {
    absl::StatusOr<std::string> r = HttpGet(absl::StrCat("https://", host, ":", server.port(), "/p.png"), Limits());
    ASSERT_TRUE(r.ok()) << host << ": " << r.status();
    EXPECT_EQ(*r, "secret /p.png");
  }
}

TEST_F(HttpsGet, RefusesAnUntrustedCertificateOrAnotherName) {
  unsetenv("SSL_CERT_FILE");  // the system's trust store does not hold the test's certificate
  LoopbackServer server([](const std::string&) { return Reply{Ok("x")}; }, /*tls=*/true);
  absl::StatusOr<std::string> r = HttpGet(absl::StrCat("https://localhost:", server.port(), "/"), Limits());
  EXPECT_THAT(r.status().message(), HasSubstr("TLS handshake with localhost"));
  EXPECT_THAT(r.status().message(), HasSubstr("certificate verify failed"));

  Trust();
  LoopbackServer elsewhere([](const std::string&) { return Reply{Ok("x")}; }, /*tls=*/true, "127.0.0.2");
  r = HttpGet(absl::StrCat("https://127.0.0.2:", elsewhere.port(), "/"), Limits());
  EXPECT_THAT(r.status().message(), HasSubstr("certificate verify failed"));
}

TEST_F(HttpsGet, EndsAStalledHandshakeAtTheDeadline) {
  Trust();
  // A socket that listens and never accepts: the kernel completes the connection, and the
  // client's TLS hello waits for an answer that never comes.
  asio::io_context io;
  tcp::acceptor silent(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  absl::StatusOr<std::string> r =
      HttpGet(absl::StrCat("https://127.0.0.1:", silent.local_endpoint().port(), "/"), Limits(300));
  EXPECT_THAT(r.status().message(), HasSubstr("took more than 0.3 s"));
}

}  // namespace
}  // namespace ag::serve
