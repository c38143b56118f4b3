/* A trainer-side process: publishes version 1 of model "example" (two float32
 * tensors) from its own memory and serves it until stdin closes.
 *   publisher tcp://127.0.0.1:7070
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
    for (int i = 0; i < N; ++i) weights[i] = (float)i * 0.5f;
    for (int i = 0; i < 1024; ++i) bias[i] = (float)-i;

    th_client_config cc;
    th_client_config_init(&cc, sizeof cc);
    cc.server_url = argv[1];
    cc.worker_name = "example-publisher";
    th_client *client = NULL;
    if (th_client_create(&client, &cc) != TH_OK) {
        fprintf(stderr, "connect: %s\n", th_last_error());
        return 1;
    }

    th_tensor tensors[2] = {
        {.name = "weights", .dtype = TH_DTYPE_FLOAT32, .ndim = 2, .shape = {1024, 1024}, .data = weights,
         .nbytes = sizeof weights, .mem_kind = TH_MEM_HOST},
        {.name = "bias", .dtype = TH_DTYPE_FLOAT32, .ndim = 1, .shape = {1024}, .data = bias,
         .nbytes = sizeof bias, .mem_kind = TH_MEM_HOST},
    };
    th_publish_config pc;
    th_publish_config_init(&pc, sizeof pc);
    pc.model = "example";
    pc.version = 1;
    th_replica *replica = NULL;
    if (th_publish(client, &pc, tensors, 2, &replica) != TH_OK) {
        fprintf(stderr, "publish: %s\n", th_last_error());
        th_client_destroy(client);
        return 1;
    }
    printf("published example v1\n");
    fflush(stdout);

    while (getchar() != EOF) {
    }
    th_replica_release(replica);
    th_client_destroy(client);
    return 0;
}
