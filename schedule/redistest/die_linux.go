package redistest

import "syscall"

// dieWithTest has the kernel kill a server when the test process dies
// without its cleanups (a go test -timeout, say): a Sentinel left running
// would reconfigure later servers on the ports it knows.
func dieWithTest() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
