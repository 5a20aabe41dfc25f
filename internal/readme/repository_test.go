package readme

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
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
