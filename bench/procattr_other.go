//go:build !linux

package bench

import "os/exec"

// dieWithParent does nothing here: stop servers explicitly.
func dieWithParent(*exec.Cmd) {}
