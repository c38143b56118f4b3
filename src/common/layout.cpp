#include "common/layout.hpp"

#include <algorithm>
#include <unordered_set>

#include "common/error.hpp"

namespace th {

const char *dtype_name(th_dtype dtype) {
    switch (dtype) {
        case TH_DTYPE_UINT8: return "uint8";
        case TH_DTYPE_INT8: return "int8";
        case TH_DTYPE_INT16: return "int16";
        case TH_DTYPE_INT32: return "int32";
        case TH_DTYPE_INT64: return "int64";
        case TH_DTYPE_FLOAT16: return "float16";
        case TH_DTYPE_BFLOAT16: return "bfloat16";
        case TH_DTYPE_FLOAT32: return "float32";
        case TH_DTYPE_FLOAT64: return "float64";
        case TH_DTYPE_BOOL: return "bool";
        case TH_DTYPE_FLOAT8_E4M3: return "float8_e4m3";
        case TH_DTYPE_FLOAT8_E5M2: return "float8_e5m2";
        case TH_DTYPE_UINT16: return "uint16";
        case TH_DTYPE_UINT32: return "uint32";
        case TH_DTYPE_UINT64: return "uint64";
    }
    return "unknown";
}

uint64_t expected_nbytes(th_dtype dtype, const std::vector<int64_t> &shape) {
    uint64_t n = th_dtype_size(dtype);
    if (n == 0) fail(TH_ERR_INVALID_ARG, "unknown dtype ", static_cast<int>(dtype));
    if (shape.size() > TH_MAX_DIMS) fail(TH_ERR_INVALID_ARG, "more than ", TH_MAX_DIMS, " dimensions");
    for (int64_t d : shape) {
        if (d < 0) fail(TH_ERR_INVALID_ARG, "negative dimension ", d);
        if (d != 0 && n > UINT64_MAX / static_cast<uint64_t>(d))
            fail(TH_ERR_INVALID_ARG, "tensor size overflows 64 bits");
        n *= static_cast<uint64_t>(d);
    }
    return n;
}

Layout::Layout(std::vector<TensorSpec> tensors, uint64_t chunk_bytes)
    : tensors_(std::move(tensors)), chunk_bytes_(chunk_bytes) {
    if (chunk_bytes_ < kMinChunkBytes || chunk_bytes_ > kMaxChunkBytes)
        fail(TH_ERR_INVALID_ARG, "chunk size ", chunk_bytes_, " is outside [", kMinChunkBytes, ", ",
             kMaxChunkBytes, "]");
    if (tensors_.empty()) fail(TH_ERR_INVALID_ARG, "a shard needs at least one tensor");
    if (tensors_.size() > kMaxTensors) fail(TH_ERR_INVALID_ARG, "too many tensors: ", tensors_.size());
    std::unordered_set<std::string> names;
    offsets_.reserve(tensors_.size());
    for (size_t i = 0; i < tensors_.size(); ++i) {
        const TensorSpec &t = tensors_[i];
        if (t.name.empty() || t.name.size() > kMaxNameBytes)
            fail(TH_ERR_INVALID_ARG, "tensor ", i, " has an empty or over-long name");
        if (!names.insert(t.name).second) fail(TH_ERR_INVALID_ARG, "tensor name '", t.name, "' appears twice");
        uint64_t want = expected_nbytes(t.dtype, t.shape);
        if (want != t.nbytes)
            fail(TH_ERR_INVALID_ARG, "tensor '", t.name, "': nbytes ", t.nbytes, " but ", dtype_name(t.dtype),
                 " of that shape is ", want, " bytes");
        offsets_.push_back(total_);
        if (total_ + t.nbytes < total_) fail(TH_ERR_INVALID_ARG, "shard size overflows 64 bits");
        total_ += t.nbytes;
    }
    if (total_ == 0) fail(TH_ERR_INVALID_ARG, "a shard must hold at least one byte");
    uint64_t chunks = (total_ + chunk_bytes_ - 1) / chunk_bytes_;
    if (chunks > UINT32_MAX) fail(TH_ERR_INVALID_ARG, "too many chunks; raise the chunk size");
    num_chunks_ = static_cast<uint32_t>(chunks);
}

int64_t Layout::find(const std::string &name) const {
    for (size_t i = 0; i < tensors_.size(); ++i)
        if (tensors_[i].name == name) return static_cast<int64_t>(i);
    return -1;
}

uint64_t Layout::chunk_end(uint32_t c) const { return std::min(total_, chunk_begin(c) + chunk_bytes_); }

std::vector<Segment> Layout::segments(uint64_t begin, uint64_t end) const {
    std::vector<Segment> out;
    if (begin >= end) return out;
    // The last tensor starting at or before begin.
    size_t i = static_cast<size_t>(std::upper_bound(offsets_.begin(), offsets_.end(), begin) - offsets_.begin()) - 1;
    for (; i < tensors_.size() && offsets_[i] < end; ++i) {
        uint64_t t_begin = offsets_[i], t_end = offsets_[i] + tensors_[i].nbytes;
        uint64_t b = std::max(begin, t_begin), e = std::min(end, t_end);
        if (b < e) out.push_back({static_cast<uint32_t>(i), b - t_begin, e - b});
    }
    return out;
}

std::pair<uint32_t, uint32_t> Layout::chunks_covering(uint64_t begin, uint64_t end) const {
    uint32_t first = static_cast<uint32_t>(begin / chunk_bytes_);
    uint32_t last = static_cast<uint32_t>((end + chunk_bytes_ - 1) / chunk_bytes_);
    return {first, std::min(last, num_chunks_)};
}

std::string describe_mismatch(const std::vector<TensorSpec> &published, const std::vector<TensorSpec> &given) {
    if (published.size() != given.size())
        return str("the shard has ", published.size(), " tensors, ", given.size(), " given");
    for (size_t i = 0; i < published.size(); ++i) {
        const TensorSpec &p = published[i], &g = given[i];
        if (p.name != g.name) return str("tensor ", i, " is '", p.name, "', '", g.name, "' given");
        if (p.dtype != g.dtype)
            return str("tensor ", i, " '", p.name, "' is ", dtype_name(p.dtype), ", ", dtype_name(g.dtype), " given");
        if (p.nbytes != g.nbytes)
            return str("tensor ", i, " '", p.name, "' has ", p.nbytes, " bytes, ", g.nbytes, " given");
        if (p.shape != g.shape) return str("tensor ", i, " '", p.name, "' has another shape");
    }
    return {};
}

}  // namespace th
