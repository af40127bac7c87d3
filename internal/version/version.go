// Package version is relay's version, set at build time with
// -ldflags "-X github.com/relaydev/relay/internal/version.Version=...".
package version

// Version is relay's version, sent in the User-Agent header.
var Version = "0.1.0-dev"
