#include "wire/status_json.hpp"

#include <cstdio>

namespace th {

namespace {

class Json {
  public:
    std::string out;
    void key(const char *k) {
        comma();
        quote(k);
        out += ':';
        fresh_ = true;
    }
    void open(char c) {
        comma();
        out += c;
        fresh_ = true;
    }
    void close(char c) {
        out += c;
        fresh_ = false;
    }
    void num(uint64_t v) {
        comma();
        out += std::to_string(v);
    }
    void null() {
        comma();
        out += "null";
    }
    void boolean(bool v) {
        comma();
        out += v ? "true" : "false";
    }
    void str(const std::string &s) {
        comma();
        quote(s);
    }

  private:
    void quote(const std::string &s) {
        out += '"';
        for (unsigned char c : s) {
            if (c == '"' || c == '\\') {
                out += '\\';
                out += static_cast<char>(c);
            } else if (c < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", c);
                out += buf;
            } else {
                out += static_cast<char>(c);
            }
        }
        out += '"';
    }
    void comma() {
        if (!fresh_ && !out.empty()) out += ',';
        fresh_ = false;
    }
    bool fresh_ = true;
};

const char *text(const flatbuffers::String *s) { return s ? s->c_str() : ""; }

}  // namespace

std::string status_to_json(const wire::StatusReply &s) {
    Json j;
    j.open('{');
    j.key("server_epoch"), j.num(s.server_epoch());
    j.key("uptime_ms"), j.num(s.uptime_ms());
    j.key("workers"), j.open('[');
    if (s.workers())
        for (const auto *w : *s.workers()) {
            j.open('{');
            j.key("worker_id"), j.num(w->worker_id());
            j.key("name"), j.str(text(w->name()));
            j.key("labels"), j.open('{');
            if (w->labels())
                for (const auto *l : *w->labels()) j.key(text(l->key())), j.str(text(l->value()));
            j.close('}');
            j.key("bytes_served"), j.num(w->bytes_served());
            j.key("active_reads"), j.num(w->active_reads());
            j.key("last_seen_ms_ago"), j.num(w->alive_ms());
            j.close('}');
        }
    j.close(']');
    j.key("models"), j.open('[');
    if (s.models())
        for (const auto *m : *s.models()) {
            j.open('{');
            j.key("name"), j.str(text(m->name()));
            j.key("latest");
            if (m->has_latest()) j.num(m->latest());
            else j.null();
            j.key("versions"), j.open('[');
            if (m->versions())
                for (const auto *v : *m->versions()) {
                    j.open('{');
                    j.key("version"), j.num(v->version());
                    j.key("num_shards"), j.num(v->num_shards());
                    j.key("committed"), j.boolean(v->committed());
                    j.key("pinned"), j.boolean(v->pinned());
                    j.key("required"), j.boolean(v->required());
                    j.key("shards"), j.open('[');
                    if (v->shards())
                        for (const auto *sh : *v->shards()) {
                            j.open('{');
                            j.key("shard"), j.num(sh->shard());
                            j.key("bytes"), j.num(sh->total_bytes());
                            j.key("chunks"), j.num(sh->num_chunks());
                            j.key("replicas"), j.open('[');
                            if (sh->replicas())
                                for (const auto *r : *sh->replicas()) {
                                    j.open('{');
                                    j.key("replica_id"), j.num(r->replica_id());
                                    j.key("worker_id"), j.num(r->worker_id());
                                    j.key("publisher"), j.boolean(r->publisher());
                                    j.key("complete"), j.boolean(r->complete());
                                    j.key("chunks_done"), j.num(r->chunks_done());
                                    j.key("bytes_served"), j.num(r->bytes_served());
                                    j.key("owned"), j.boolean(r->owned());
                                    j.key("mutating"), j.boolean(r->mutating());
                                    j.key("active_reads"), j.num(r->active_reads());
                                    j.key("reported_chunks"), j.num(r->reported_chunks());
                                    j.key("stalled"), j.boolean(r->stalled());
                                    j.close('}');
                                }
                            j.close(']');
                            j.close('}');
                        }
                    j.close(']');
                    j.key("reads"), j.open('[');
                    if (v->reads())
                        for (const auto *r : *v->reads()) {
                            j.open('{');
                            j.key("reader"), j.num(r->reader());
                            j.key("source"), j.num(r->source());
                            j.key("shard"), j.num(r->shard());
                            j.key("bytes"), j.num(r->bytes());
                            j.key("active"), j.boolean(r->active());
                            j.close('}');
                        }
                    j.close(']');
                    j.close('}');
                }
            j.close(']');
            j.close('}');
        }
    j.close(']');
    j.close('}');
    return j.out;
}

std::string describe_to_json(const std::string &model, uint32_t shard, const wire::DescribeReply &d) {
    Json j;
    j.open('{');
    j.key("model"), j.str(model);
    j.key("version"), j.num(d.version());
    j.key("num_shards"), j.num(d.num_shards());
    j.key("shard"), j.num(shard);
    j.key("chunk_bytes"), j.num(d.chunk_bytes());
    j.key("total_bytes"), j.num(d.total_bytes());
    j.key("tensors"), j.open('[');
    for (const TensorSpec &t : wire::get_tensors(d.tensors())) {
        j.open('{');
        j.key("name"), j.str(t.name);
        j.key("dtype"), j.str(dtype_name(t.dtype));
        j.key("dtype_id"), j.num(static_cast<uint64_t>(t.dtype));
        j.key("shape"), j.open('[');
        for (int64_t x : t.shape) j.num(static_cast<uint64_t>(x));
        j.close(']');
        j.key("nbytes"), j.num(t.nbytes);
        j.close('}');
    }
    j.close(']');
    j.close('}');
    return j.out;
}

}  // namespace th
