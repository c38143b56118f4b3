#include "server/metrics.hpp"

#include <arpa/inet.h>

#include <cstdio>

#include "common/error.hpp"
#include "control/rpc.hpp"

namespace th {

void Histogram::observe(double v) {
    size_t i = 0;
    while (i < bounds_.size() && v > bounds_[i]) ++i;
    counts_[i]++;
    sum_ += v;
    count_++;
}

namespace {
std::string number(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return buf;
}
}  // namespace

void Histogram::render(std::string &out, const std::string &name, const std::string &help) const {
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
    uint64_t cumulative = 0;
    for (size_t i = 0; i < bounds_.size(); ++i) {
        cumulative += counts_[i];
        out += name + "_bucket{le=\"" + number(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
    }
    out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
    out += name + "_sum " + number(sum_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
}

void render_family(std::string &out, const std::string &name, const char *type, const std::string &help,
                   const std::vector<std::pair<std::string, double>> &samples) {
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    for (const auto &[labels, value] : samples) out += name + labels + " " + number(value) + "\n";
}

MetricsEndpoint::MetricsEndpoint(const std::string &url, std::function<std::string()> render)
    : render_(std::move(render)) {
    nng_url *u = nullptr;
    if (int rv = nng_url_parse(&u, url.c_str()); rv != 0) fail(TH_ERR_INVALID_ARG, "bad metrics URL '", url, "': ", nng_error(rv));
    int rv = nng_http_server_hold(&server_, u);
    std::string host = u->u_hostname;
    nng_url_free(u);
    if (rv != 0) fail(TH_ERR_INVALID_ARG, "metrics server for '", url, "': ", nng_error(rv));
    nng_http_handler *h = nullptr;
    if ((rv = nng_http_handler_alloc(&h, "/metrics", &MetricsEndpoint::on_request)) != 0 ||
        (rv = nng_http_handler_set_method(h, "GET")) != 0 || (rv = nng_http_handler_set_data(h, this, nullptr)) != 0 ||
        (rv = nng_http_server_add_handler(server_, h)) != 0 || (rv = nng_http_server_start(server_)) != 0) {
        nng_http_server_release(server_);
        fail(rv == NNG_EADDRINUSE ? TH_ERR_UNAVAILABLE : TH_ERR_INVALID_ARG, "cannot serve metrics on '", url, "': ",
             nng_error(rv));
    }
    nng_sockaddr sa{};
    int port = 0;
    if (nng_http_server_get_addr(server_, &sa) == 0 && sa.s_family == NNG_AF_INET) port = ntohs(sa.s_in.sa_port);
    url_ = "http://" + host + ":" + std::to_string(port) + "/metrics";
}

MetricsEndpoint::~MetricsEndpoint() {
    nng_http_server_stop(server_);
    nng_http_server_release(server_);
}

void MetricsEndpoint::on_request(nng_aio *aio) {
    auto *handler = static_cast<nng_http_handler *>(nng_aio_get_input(aio, 1));
    auto *self = static_cast<MetricsEndpoint *>(nng_http_handler_get_data(handler));
    nng_http_res *res = nullptr;
    if (int rv = nng_http_res_alloc(&res); rv != 0) {
        nng_aio_finish(aio, rv);
        return;
    }
    std::string body = self->render_();
    nng_http_res_set_header(res, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    nng_http_res_copy_data(res, body.data(), body.size());
    nng_aio_set_output(aio, 0, res);
    nng_aio_finish(aio, 0);
}

}  // namespace th
