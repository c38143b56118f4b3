#include "control/http_client.hpp"

#include <memory>

#include <nng/nng.h>
#include <nng/supplemental/http/http.h>

#include "common/error.hpp"
#include "control/rpc.hpp"

namespace th {

namespace {
template <typename T, void (*Free)(T *)>
struct Freer {
    void operator()(T *p) const { Free(p); }
};
template <typename T, void (*Free)(T *)>
using Owned = std::unique_ptr<T, Freer<T, Free>>;

// GET url, or POST body (JSON) to it when there is one.
std::string transact(const std::string &url, const std::string *body, uint32_t timeout_ms) {
    const char *method = body != nullptr ? "POST" : "GET";
    nng_url *raw_url = nullptr;
    if (int rv = nng_url_parse(&raw_url, url.c_str()); rv != 0) fail(TH_ERR_INVALID_ARG, "bad URL '", url, "': ", nng_error(rv));
    Owned<nng_url, nng_url_free> u(raw_url);
    nng_http_client *raw_client = nullptr;
    nng_http_req *raw_req = nullptr;
    nng_http_res *raw_res = nullptr;
    nng_aio *raw_aio = nullptr;
    if (int rv = nng_http_client_alloc(&raw_client, u.get()); rv != 0) fail(TH_ERR_INVALID_ARG, "HTTP client for '", url, "': ", nng_error(rv));
    Owned<nng_http_client, nng_http_client_free> client(raw_client);
    if (int rv = nng_http_req_alloc(&raw_req, u.get()); rv != 0) fail(TH_ERR_NO_MEMORY, "HTTP request: ", nng_error(rv));
    Owned<nng_http_req, nng_http_req_free> req(raw_req);
    if (body != nullptr) {
        nng_http_req_set_method(req.get(), method);
        nng_http_req_set_header(req.get(), "Content-Type", "application/json");
        if (int rv = nng_http_req_copy_data(req.get(), body->data(), body->size()); rv != 0)
            fail(TH_ERR_NO_MEMORY, "HTTP request body: ", nng_error(rv));
    }
    if (int rv = nng_http_res_alloc(&raw_res); rv != 0) fail(TH_ERR_NO_MEMORY, "HTTP response: ", nng_error(rv));
    Owned<nng_http_res, nng_http_res_free> res(raw_res);
    if (int rv = nng_aio_alloc(&raw_aio, nullptr, nullptr); rv != 0) fail(TH_ERR_NO_MEMORY, "aio: ", nng_error(rv));
    Owned<nng_aio, nng_aio_free> aio(raw_aio);
    nng_aio_set_timeout(aio.get(), static_cast<nng_duration>(timeout_ms));
    nng_http_client_transact(client.get(), req.get(), res.get(), aio.get());
    nng_aio_wait(aio.get());
    if (int rv = nng_aio_result(aio.get()); rv != 0)
        fail(rv == NNG_ETIMEDOUT ? TH_ERR_TIMEOUT : TH_ERR_UNAVAILABLE, "cannot reach ", url, " (", nng_error(rv), ")");
    if (uint16_t status = nng_http_res_get_status(res.get()); status != NNG_HTTP_STATUS_OK)
        fail(TH_ERR_PROTOCOL, method, " ", url, " answered ", status, " ", nng_http_res_get_reason(res.get()));
    void *data = nullptr;
    size_t size = 0;
    nng_http_res_get_data(res.get(), &data, &size);
    return std::string(static_cast<const char *>(data), size);
}

}  // namespace

std::string http_get(const std::string &url, uint32_t timeout_ms) { return transact(url, nullptr, timeout_ms); }

std::string http_post_json(const std::string &url, const std::string &body, uint32_t timeout_ms) {
    return transact(url, &body, timeout_ms);
}

}  // namespace th
