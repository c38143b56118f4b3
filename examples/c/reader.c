/* A rollout-side process: waits for model "example", fetches the newest
 * version into its own buffers and checks the values.
 *   reader tcp://127.0.0.1:7070
 * Uses only <tensorhub/tensorhub.h>. */
#include <stdio.h>
#include <stdlib.h>

#include <tensorhub/tensorhub.h>

enum { N = 1 << 20 };

static float weights[N], bias[1024];

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s SERVER_URL\n", argv[0]);
        return 2;
    }
    th_client_config cc;
    th_client_config_init(&cc, sizeof cc);
    cc.server_url = argv[1];
    cc.worker_name = "example-reader";
    th_client *client = NULL;
    if (th_client_create(&client, &cc) != TH_OK) {
        fprintf(stderr, "connect: %s\n", th_last_error());
        return 1;
    }
    uint64_t version = 0;
    if (th_wait_for_version(client, "example", 0, 10000, &version) != TH_OK) {
        fprintf(stderr, "wait: %s\n", th_last_error());
        th_client_destroy(client);
        return 1;
    }
    th_tensor dst[2] = {
        {.name = "weights", .dtype = TH_DTYPE_FLOAT32, .ndim = 2, .shape = {1024, 1024}, .data = weights,
         .nbytes = sizeof weights, .mem_kind = TH_MEM_HOST},
        {.name = "bias", .dtype = TH_DTYPE_FLOAT32, .ndim = 1, .shape = {1024}, .data = bias,
         .nbytes = sizeof bias, .mem_kind = TH_MEM_HOST},
    };
    th_fetch_config fc;
    th_fetch_config_init(&fc, sizeof fc);
    fc.model = "example";
    fc.version = version;
    th_status st = th_fetch(client, &fc, dst, 2, &version, NULL);
    if (st != TH_OK) {
        fprintf(stderr, "fetch: %s: %s\n", th_status_str(st), th_last_error());
        th_client_destroy(client);
        return 1;
    }
    for (int i = 0; i < N; ++i)
        if (weights[i] != (float)i * 0.5f) {
            fprintf(stderr, "weights[%d] differs\n", i);
            return 1;
        }
    printf("fetched example v%llu: weights[1000] = %.1f, bias[3] = %.1f\n", (unsigned long long)version,
           weights[1000], bias[3]);
    th_client_destroy(client);
    return 0;
}
