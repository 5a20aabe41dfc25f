package readme

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxTracked is the most bytes one tracked file may hold: a larger one is
// a build output or a data set committed by mistake (a 15.8 MB binary
// once was).
const maxTracked = 1 << 20

func TestNoLargeTrackedFiles(t *testing.T) {
	gitCmd, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git command:", err)
	}
	root, _ := readme(t)
	cmd := exec.Command(gitCmd, "ls-files", "-z")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Skip("not a git checkout:", err)
	}
	for _, name := range bytes.Split(bytes.TrimRight(out, "\x00"), []byte{0}) {
		fi, err := os.Lstat(filepath.Join(root, string(name)))
		if err != nil {
			continue // deleted in the work tree, not yet committed
		}
		if fi.Mode().IsRegular() && fi.Size() > maxTracked {
			t.Errorf("%s is tracked and %d bytes, over %d: build outputs and data sets belong outside the repository", name, fi.Size(), maxTracked)
		}
	}
}

// maxBenchmarks is BENCHMARKS.md's budget, the README's: one results table
// per section from one run, the targets' verdicts, one line per trick.
const maxBenchmarks = maxReadme

func TestBenchmarksSize(t *testing.T) {
	root, _ := readme(t)
	text, err := os.ReadFile(filepath.Join(root, "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(text) > maxBenchmarks {
		t.Errorf("BENCHMARKS.md is %d bytes, over its budget of %d: keep only the latest run's figures, one line per result", len(text), maxBenchmarks)
	}
}

// routerExamples serve the same routes with the same limits; each test
// file holds the same table of cases, so that each folder can be copied
// alone.
var routerExamples = []string{"nethttp", "chi", "echo", "echov5", "gin"}

func TestExampleTablesAlike(t *testing.T) {
	root, _ := readme(t)
	table := func(name string) string {
		text, err := os.ReadFile(filepath.Join(root, "examples", name, "app_test.go"))
		if err != nil {
			t.Fatal(err)
		}
		s := string(text)
		i, j := strings.Index(s, "// step is one request"), strings.Index(s, "// TestApp runs")
		if i < 0 || j < i {
			t.Fatalf("examples/%s/app_test.go: no table of cases (from \"// step is one request\" to \"// TestApp runs\")", name)
		}
		return s[i:j]
	}
	want := table(routerExamples[0])
	for _, name := range routerExamples[1:] {
		if table(name) != want {
			t.Errorf("examples/%s/app_test.go's table of cases differs from examples/%s's: the router examples answer alike", name, routerExamples[0])
		}
	}
}
