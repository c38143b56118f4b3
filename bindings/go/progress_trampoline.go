package tensorhub

// The C side of FetchOptions.Progress (progress.go, whose preamble may hold
// declarations only, as it exports a Go function): the library calls
// th_go_progress, which hands the counts to the fetch its user_data names.

/*
#include <stdint.h>
#include "tensorhub/tensorhub.h"

extern void goTensorhubProgress(uint64_t done, uint64_t total, uintptr_t handle);

static void th_go_progress(uint64_t done, uint64_t total, void *user_data) {
	goTensorhubProgress(done, total, (uintptr_t)user_data);
}

// interval_ms 0 keeps the default th_fetch_config_init put there.
void th_go_set_progress(th_fetch_config *cfg, uintptr_t handle, uint32_t interval_ms) {
	cfg->progress = th_go_progress;
	cfg->progress_user_data = (void *)handle;
	if (interval_ms != 0) cfg->progress_interval_ms = interval_ms;
}
*/
import "C"
