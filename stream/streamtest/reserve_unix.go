//go:build unix

package streamtest

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// reserve takes an exclusive lock on a file named for port in the temporary
// directory, which other test processes asking for the same port see; the
// lock goes with the process if it dies. The files stay (one per port ever
// reserved, empty): removing one while another process opens it would let
// two processes hold "the" lock.
func reserve(port int) (release func(), ok bool) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "relay-testport-"+strconv.Itoa(port)+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return func() { f.Close() }, true
}
