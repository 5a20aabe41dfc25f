//go:build !linux

package promtest

import "os/exec"

// dieWithParent does nothing here: only Linux has a parent-death signal.
// Cleanups still stop every server when a test ends normally.
func dieWithParent(*exec.Cmd) {}
