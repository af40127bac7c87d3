//go:build !unix

package replica

// openFilesLimit is unknown outside Unix.
func openFilesLimit() (uint64, bool) { return 0, false }
