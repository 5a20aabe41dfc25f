package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestGenerated fails when an adapter's options_gen.go is not what
// go generate ./nethttp writes from nethttp's current options: run it.
func TestGenerated(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	files, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(adapters) {
		t.Fatalf("%d files generated, want %d", len(files), len(adapters))
	}
	for path, want := range files {
		got, err := os.ReadFile(filepath.Join(root, path))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is stale (run go generate ./nethttp): %v", path, err)
		}
	}
}
