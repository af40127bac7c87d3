//go:build !linux

package redistest

import "syscall"

// dieWithTest: only Linux kills a child when its parent dies.
func dieWithTest() *syscall.SysProcAttr { return nil }
