package tensorhub_test

import (
	"os"
	"strings"
	"testing"
)

// The README shows Example's body; this keeps the copy from drifting.
func TestReadmeQuickstartIsTheExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```go\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("README.md has no ```go block")
	}
	if !strings.Contains(dedent(string(example)), dedent(block)) {
		t.Fatalf("README.md's quickstart differs from Example in example_test.go:\n%s", block)
	}
}

// dedent drops leading tabs and spaces, which differ between the two copies.
func dedent(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimLeft(l, " \t")
	}
	return strings.Join(lines, "\n")
}
