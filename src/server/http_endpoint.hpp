// The server's HTTP side (NNG's HTTP server): a few fixed GET routes, each
// answered by a function called on an NNG thread. It carries /metrics, the
// live page and the status document the page polls.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nng/nng.h>
#include <nng/supplemental/http/http.h>

namespace th {

struct HttpRoute {
    std::string path;          // exact path, e.g. "/metrics"
    std::string content_type;
    std::function<std::string()> body;
};

class HttpEndpoint {
  public:
    // url: "http://0.0.0.0:9090" (port 0 picks one).
    HttpEndpoint(const std::string &url, std::vector<HttpRoute> routes);
    ~HttpEndpoint();
    HttpEndpoint(const HttpEndpoint &) = delete;
    HttpEndpoint &operator=(const HttpEndpoint &) = delete;
    // "http://host:port" with the port actually bound.
    const std::string &url() const { return url_; }

  private:
    static void on_request(nng_aio *aio);
    const std::vector<HttpRoute> routes_;  // handlers point into it: never resized
    nng_http_server *server_ = nullptr;
    std::string url_;
};

}  // namespace th
