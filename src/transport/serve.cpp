// The holder's side of the active-message read path: answering read
// requests from the registered memory of replicas it holds. One-sided reads
// never reach this process's CPU.
#include <algorithm>
#include <cstring>

#include "common/log.hpp"
#include "common/trace.hpp"
#include "transport/reads.hpp"

namespace th {

namespace {

// An answer being sent: what must live until UCX is done.
struct Answer {
    ReadReplyHeader header;
    RegionRef region;
    ~Answer() {
        if (region) region->answering--;
    }
};

// Sends one answer on the reply endpoint: n bytes at bytes (from region's
// registered memory), or only the header. False if UCX refused it at once.
bool send_answer(ucp_ep_h reply_ep, const ReadReplyHeader &header, RegionRef region, const void *bytes, size_t n) {
    auto *a = new Answer{header, std::move(region)};
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    prm.flags = UCP_AM_SEND_FLAG_EAGER;
    prm.user_data = a;
    // A failed answer (the reader gave up, went away, or this process was
    // paused and the reader closed its endpoint) is the reader's to handle,
    // through its endpoint error or its deadline. Nothing is left to do here.
    prm.cb.send = [](void *request, ucs_status_t, void *user_data) {
        ucp_request_free(request);
        delete static_cast<Answer *>(user_data);
    };
    if (a->region) {
        prm.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
        prm.memh = a->region->memh;
        prm.memory_type = a->region->kind == TH_MEM_CUDA ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
    }
    ucs_status_ptr_t req = ucp_am_send_nbx(reply_ep, kReadReply, &a->header, sizeof a->header, bytes, n, &prm);
    if (UCS_PTR_IS_PTR(req)) return true;  // completes later: prm.cb.send
    delete a;
    return !UCS_PTR_IS_ERR(req);
}

}  // namespace

ucs_status_t UcxWorker::on_read_request(void *arg, const void *header, size_t header_length, void *data, size_t length,
                                        const ucp_am_recv_param_t *param) {
    auto *self = static_cast<UcxWorker *>(arg);
    ReadRequestHeader h{};
    bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    if (header_length != sizeof h || rndv || length > kMaxRkey ||
        (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0) {
        // Not a request of ours, or nobody to answer.
        if (rndv) ucp_am_data_release(self->main_.worker.load(), data);
        TH_LOG(Warn, "dropped a malformed read request (", header_length, "-byte header, ", length, "-byte payload)");
        return UCS_OK;
    }
    std::memcpy(&h, header, sizeof h);
    trace::event("serve", h.remote, h.length);
    ReadReplyHeader reply{h.id, UCS_OK, 0};
    RegionRef region;
    if (h.length == 0) {
        // A ping: answered with no bytes.
    } else if (h.length > kMaxRead) {
        reply.status = UCS_ERR_INVALID_PARAM;
    } else {
        region = self->registry_.served(h.remote, h.length, static_cast<const uint8_t *>(data), length);
        if (!region) reply.status = UCS_ERR_INVALID_ADDR;
    }
    if (reply.status != UCS_OK)
        TH_LOG(Warn, "refused to serve a read of ", h.length, " bytes at 0x", std::hex, h.remote, std::dec, ": ",
               reply.status == UCS_ERR_INVALID_ADDR ? "no replica of this process with that key holds it"
                                                   : "longer than any read");
    // Answered here, inside the handler: the reply endpoint is only known to
    // be valid until the handler returns.
    if (!region) {
        self->answers_sent_++;
        send_answer(param->reply_ep, reply, nullptr, nullptr, 0);
        return UCS_OK;
    }
    // served() counted the first answer; each further one is counted once it
    // holds the region (so that withdraw_unused never sees fewer holders
    // than answers), and the last takes this handler's reference: none is
    // left here once the reader may have its bytes.
    uint64_t piece = h.length > kAnsweredWhole ? kMaxAnswer : h.length;
    for (uint64_t off = 0; off < h.length; off += piece) {
        reply.offset = static_cast<uint32_t>(off);
        RegionRef held = off + piece >= h.length ? std::move(region) : region;
        if (off > 0) held->answering++;
        self->answers_sent_++;  // before it may arrive
        if (!send_answer(param->reply_ep, reply, std::move(held), reinterpret_cast<const void *>(h.remote + off),
                         std::min(piece, h.length - off)))
            break;  // the endpoint failed: the reader sees it, or its deadline passes
    }
    return UCS_OK;
}

}  // namespace th
