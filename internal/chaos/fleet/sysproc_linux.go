package fleet

import "syscall"

// sysProcAttr makes the kernel kill a worker whose controlling process died,
// so that no worker outlives a test process killed by its timeout.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
