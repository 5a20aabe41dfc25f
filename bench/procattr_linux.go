package bench

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill a server when this process dies
// without stopping it (a panic, a SIGKILL), so no redis-server outlives
// the benchmark.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
