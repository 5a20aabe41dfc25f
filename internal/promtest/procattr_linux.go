package promtest

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill prometheus when the test binary dies
// without running its cleanups (a -timeout panic, a SIGKILL).
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
