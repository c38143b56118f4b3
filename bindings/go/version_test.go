package tensorhub_test

import (
	"fmt"
	"testing"

	"tensorhub.dev/tensorhub"
)

// The loaded library is the one the header describes, and its two ways of
// saying its version agree.
func TestVersionNumberIsTheHeadersAndMatchesVersion(t *testing.T) {
	if got := tensorhub.VersionNumber(); got != tensorhub.HeaderVersionNumber {
		t.Fatalf("library version number %d, header %d", got, tensorhub.HeaderVersionNumber)
	}
	var major, minor, patch uint32
	if n, err := fmt.Sscanf(tensorhub.Version(), "%d.%d.%d", &major, &minor, &patch); n != 3 || err != nil {
		t.Fatalf("Version() %q is not MAJOR.MINOR.PATCH: %v", tensorhub.Version(), err)
	}
	if want := major*10000 + minor*100 + patch; tensorhub.VersionNumber() != want {
		t.Fatalf("Version() %q but VersionNumber() %d", tensorhub.Version(), tensorhub.VersionNumber())
	}
}
