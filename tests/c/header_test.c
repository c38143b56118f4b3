/* The public header is C99 and safe to include twice. */
#include "tensorhub/tensorhub.h"
#include "tensorhub/tensorhub.h"

int th_header_test_sizes(void);

int th_header_test_sizes(void) {
    th_tensor t;
    th_server_config s;
    th_client_config c;
    th_publish_config p;
    th_fetch_config f;
    th_sync_stats st;
    th_range r;
    th_server_config_init(&s, sizeof s);
    th_client_config_init(&c, sizeof c);
    th_publish_config_init(&p, sizeof p);
    th_fetch_config_init(&f, sizeof f);
    th_sync_stats_init(&st, sizeof st);
    f.stats = &st;
    f.progress = 0;
    (void)t;
    r.rows = 1;
    return s.struct_size == sizeof s && c.struct_size == sizeof c && p.struct_size == sizeof p &&
           f.struct_size == sizeof f && st.struct_size == sizeof st && st.bytes == 0 &&
           f.progress_interval_ms == 100 && f.version == TH_LATEST && r.rows == 1 && TH_VERSION_NUMBER == th_version_number();
}
