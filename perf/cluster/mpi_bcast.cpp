// tensorhub-cluster-mpi: the collective baseline of the cluster benchmark.
// Rank 0 is the trainer and broadcasts S bytes with MPI_Bcast; rank r > 0 is
// a rollout host that becomes ready at T0 + offsets[r] and only then calls
// MPI_Bcast, as a real job would when its generation step ends. Each rank
// reports when it was ready and when MPI_Bcast returned; the root's return is
// when the trainer may change its weights.
//
//   mpirun ... tensorhub-cluster-mpi --bytes S [--tensors T] [--offsets 0,d1,d2,...]
//
// Rank 0 speaks the line protocol of node_io.hpp on mpirun's stdin/stdout
// ("armed", then "start T0", which it broadcasts). After a barrier that ends
// the timed part, every rank verifies its bytes and prints one JSON line.
#include <mpi.h>

#include <climits>
#include <cstdio>
#include <string>
#include <vector>

#include "args.hpp"
#include "bench_util.hpp"
#include "node_io.hpp"

using namespace th_cluster;
using th_bench::fail;
using th_bench::str;

namespace {

// MPI counts are ints: broadcast in pieces of at most 1 GiB.
void bcast(uint8_t *p, uint64_t n) {
    constexpr uint64_t kMax = 1ull << 30;
    for (uint64_t off = 0; off < n; off += kMax) {
        int count = static_cast<int>(std::min(kMax, n - off));
        if (MPI_Bcast(p + off, count, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS) fail("MPI_Bcast failed");
    }
}

int run(int argc, char **argv) {
    th_support::Args args(argc, argv);
    Payload payload = payload_option(args);
    std::vector<double> offsets;
    for (const auto &s : th_bench::split(args.get("offsets", "0"), ',')) offsets.push_back(std::stod(s));

    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double offset = rank < static_cast<int>(offsets.size()) ? offsets[rank] : 0.0;

    th_bench::PageBuffer buffer(payload.bytes);
    buffer.clear();
    if (rank == 0) payload.fill(buffer.data());
    // Connections are opened by the first collective: open them untimed.
    uint8_t warm = 0;
    MPI_Bcast(&warm, 1, MPI_BYTE, 0, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);

    double t0 = 0;
    if (rank == 0) t0 = wait_for_start();
    MPI_Bcast(&t0, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    sleep_until(t0 + offset);
    double ready = wall_now();
    bcast(buffer.data(), payload.bytes);
    double done = wall_now();
    MPI_Barrier(MPI_COMM_WORLD);  // the end of the timed part
    bool ok = rank == 0 || payload.check(buffer.data());
    emit(str("{\"role\":\"mpi\",\"rank\":", rank, ",\"ready\":", fixed(ready), ",\"done\":", fixed(done),
             ",\"bytes\":", payload.bytes, ",\"verified\":", ok ? "true" : "false", "}"));
    MPI_Barrier(MPI_COMM_WORLD);
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rc = 0;
    try {
        rc = run(argc, argv);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "tensorhub-cluster-mpi: %s\n", e.what());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
    return rc;
}
