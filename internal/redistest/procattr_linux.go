package redistest

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill the server when the test binary dies
// without running its cleanups (a -timeout panic, a SIGKILL), so no
// redis-server outlives the test binary.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
