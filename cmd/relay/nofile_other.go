//go:build !unix

package main

// openFilesLimit is unknown outside Unix.
func openFilesLimit() (uint64, bool) { return 0, false }
