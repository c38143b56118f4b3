#include "server/http_endpoint.hpp"

#include <arpa/inet.h>

#include "common/error.hpp"
#include "control/rpc.hpp"

namespace th {

HttpEndpoint::HttpEndpoint(const std::string &url, std::vector<HttpRoute> routes) : routes_(std::move(routes)) {
    nng_url *u = nullptr;
    if (int rv = nng_url_parse(&u, url.c_str()); rv != 0) fail(TH_ERR_INVALID_ARG, "bad HTTP URL '", url, "': ", nng_error(rv));
    int rv = nng_http_server_hold(&server_, u);
    std::string host = u->u_hostname;
    nng_url_free(u);
    if (rv != 0) fail(TH_ERR_INVALID_ARG, "HTTP server for '", url, "': ", nng_error(rv));
    for (const HttpRoute &route : routes_) {
        nng_http_handler *h = nullptr;
        if ((rv = nng_http_handler_alloc(&h, route.path.c_str(), &HttpEndpoint::on_request)) != 0 ||
            (rv = nng_http_handler_set_method(h, "GET")) != 0 ||
            (rv = nng_http_handler_set_data(h, const_cast<HttpRoute *>(&route), nullptr)) != 0 ||
            (rv = nng_http_server_add_handler(server_, h)) != 0)
            break;
    }
    if (rv == 0) rv = nng_http_server_start(server_);
    if (rv != 0) {
        nng_http_server_release(server_);
        fail(rv == NNG_EADDRINUSE ? TH_ERR_UNAVAILABLE : TH_ERR_INVALID_ARG, "cannot serve HTTP on '", url, "': ",
             nng_error(rv));
    }
    nng_sockaddr sa{};
    int port = 0;
    if (nng_http_server_get_addr(server_, &sa) == 0 && sa.s_family == NNG_AF_INET) port = ntohs(sa.s_in.sa_port);
    url_ = "http://" + host + ":" + std::to_string(port);
}

HttpEndpoint::~HttpEndpoint() {
    nng_http_server_stop(server_);
    nng_http_server_release(server_);
}

void HttpEndpoint::on_request(nng_aio *aio) {
    auto *handler = static_cast<nng_http_handler *>(nng_aio_get_input(aio, 1));
    const auto *route = static_cast<const HttpRoute *>(nng_http_handler_get_data(handler));
    nng_http_res *res = nullptr;
    if (int rv = nng_http_res_alloc(&res); rv != 0) {
        nng_aio_finish(aio, rv);
        return;
    }
    std::string body;
    try {
        body = route->body();
    } catch (const std::exception &e) {
        nng_http_res_set_status(res, NNG_HTTP_STATUS_INTERNAL_SERVER_ERROR);
        body = e.what();
    }
    nng_http_res_set_header(res, "Content-Type", route->content_type.c_str());
    nng_http_res_set_header(res, "Cache-Control", "no-store");
    nng_http_res_copy_data(res, body.data(), body.size());
    nng_aio_set_output(aio, 0, res);
    nng_aio_finish(aio, 0);
}

}  // namespace th
