//go:build unix

package replica

import "syscall"

// openFilesLimit is the process's soft RLIMIT_NOFILE: how many
// descriptors it may hold open.
func openFilesLimit() (uint64, bool) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, false
	}
	return uint64(lim.Cur), true
}
