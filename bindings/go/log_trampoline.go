package tensorhub

// The C side of SetLogHandler (log.go, whose preamble may hold declarations
// only, as it exports a Go function): the library calls th_go_log, which
// hands the line to the Go handler its user_data names.

/*
#include <stdint.h>
#include "tensorhub/tensorhub.h"

extern void goTensorhubLog(int level, char *message, uintptr_t handler);

static void th_go_log(th_log_level level, const char *message, void *user_data) {
	goTensorhubLog((int)level, (char *)message, (uintptr_t)user_data);
}

void th_go_set_log_handler(uintptr_t handler) {
	th_set_log_handler(handler != 0 ? th_go_log : NULL, (void *)handler);
}
*/
import "C"
