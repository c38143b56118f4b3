#include "wire/replica_desc.hpp"

#include "common/error.hpp"

namespace th {

namespace wire {

flatbuffers::Offset<wire::ReplicaDesc> put_desc(Builder &b, const th::ReplicaDesc &d) {
    std::vector<flatbuffers::Offset<Region>> regions;
    for (const auto &r : d.regions)
        regions.push_back(CreateRegion(b, r.address, r.length, b.CreateVector(r.rkey), r.mem_kind));
    std::vector<flatbuffers::Offset<TensorPlace>> places;
    for (const auto &p : d.places) places.push_back(CreateTensorPlace(b, p.region, p.offset));
    return CreateReplicaDesc(b, b.CreateVector(regions), b.CreateVector(places), d.ctrl_region, d.ctrl_offset,
                             d.ctrl_generation, d.ctrl_bytes, d.answers_waiting_reads, d.guards_reads);
}

th::ReplicaDesc get_desc(const wire::ReplicaDesc *d) {
    if (d == nullptr) fail(TH_ERR_PROTOCOL, "replica description is missing");
    th::ReplicaDesc out;
    if (d->regions() == nullptr || d->regions()->size() == 0) fail(TH_ERR_PROTOCOL, "replica has no memory regions");
    for (const auto *r : *d->regions()) {
        if (r->rkey() == nullptr || r->rkey()->size() == 0) fail(TH_ERR_PROTOCOL, "memory region without rkey");
        out.regions.push_back(
            {r->address(), r->length(), std::vector<uint8_t>(r->rkey()->begin(), r->rkey()->end()), r->mem_kind()});
    }
    if (d->places() != nullptr)
        for (const auto *p : *d->places()) out.places.push_back({p->region(), p->offset()});
    out.ctrl_region = d->ctrl_region();
    out.ctrl_offset = d->ctrl_offset();
    out.ctrl_generation = d->ctrl_generation();
    // Older holders send no size: theirs is the word alone.
    out.ctrl_bytes = d->ctrl_bytes() == 0 ? 16 : d->ctrl_bytes();
    if (out.ctrl_bytes != 16 && out.ctrl_bytes != 64)
        fail(TH_ERR_PROTOCOL, "control word of ", out.ctrl_bytes, " bytes (16 or 64 expected)");
    out.answers_waiting_reads = d->answers_waiting_reads();
    out.guards_reads = d->guards_reads() && out.answers_waiting_reads && out.ctrl_bytes == 64;
    return out;
}

}  // namespace wire

void check_desc(const ReplicaDesc &d, const std::vector<TensorSpec> &tensors) {
    if (d.places.size() != tensors.size())
        fail(TH_ERR_PROTOCOL, "replica places ", d.places.size(), " tensors, the layout has ", tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
        const PlaceDesc &p = d.places[i];
        if (p.region >= d.regions.size() || p.offset > d.regions[p.region].length ||
            d.regions[p.region].length - p.offset < tensors[i].nbytes)
            fail(TH_ERR_PROTOCOL, "tensor '", tensors[i].name, "' lies outside its memory region");
    }
    if (d.ctrl_region >= d.regions.size() || d.ctrl_offset > d.regions[d.ctrl_region].length ||
        d.regions[d.ctrl_region].length - d.ctrl_offset < (d.guards_reads ? kGuardedBlockBytes : d.ctrl_bytes))
        fail(TH_ERR_PROTOCOL, "control word lies outside its memory region");
}

}  // namespace th
