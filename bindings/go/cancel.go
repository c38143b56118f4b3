package tensorhub

/*
#include "tensorhub/tensorhub.h"
*/
import "C"

import "context"

// cancelOnDone returns a th_cancel that is signalled when ctx is canceled
// (its deadline is left to the call's timeout, see deadline), for a
// fetch's th_fetch_config.cancel or a wait, and stop, to call once the C call returned
// (it ends the watch and frees the token). A ctx that can never be done gets
// no token.
func cancelOnDone(ctx context.Context) (*C.th_cancel, func(), error) {
	if ctx.Done() == nil {
		return nil, func() {}, nil
	}
	return newCancelOnDone(ctx)
}

// newCancelOnDone is cancelOnDone for a call that may also signal the token
// itself (a fetch whose progress callback panicked): it makes one even for a
// ctx that can never be done.
func newCancelOnDone(ctx context.Context) (*C.th_cancel, func(), error) {
	var token *C.th_cancel
	if err := call(func() C.th_status { return C.th_cancel_create(&token) }); err != nil {
		return nil, nil, err
	}
	if ctx.Done() == nil {
		return token, func() { C.th_cancel_destroy(token) }, nil
	}
	select {
	case <-ctx.Done(): // done already: the fetch ends before its first read
		if ctx.Err() != context.DeadlineExceeded {
			C.th_cancel_signal(token)
		}
		return token, func() { C.th_cancel_destroy(token) }, nil
	default:
	}
	returned, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-ctx.Done():
			// A deadline is the call's own timeout to end (it was given the
			// time left, see deadline): signalled here too, the call raced
			// its timeout and ended now and then as canceled, not timed out.
			if ctx.Err() != context.DeadlineExceeded {
				C.th_cancel_signal(token)
			}
		case <-returned:
		}
	}()
	return token, func() {
		close(returned)
		<-watched // nothing signals the token after this
		C.th_cancel_destroy(token)
	}, nil
}
