// Package version is relay's version, the commit it was built from and the
// date of the build. A release build sets them with -ldflags:
//
//	go build -ldflags "-X github.com/relaydev/relay/internal/version.Version=1.2.3 \
//	    -X github.com/relaydev/relay/internal/version.Commit=$(git rev-parse HEAD) \
//	    -X github.com/relaydev/relay/internal/version.Date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
//
// Without them, Get reads what the Go toolchain recorded in the binary: the
// module version of 'go install ...@v1.2.3', and the commit and its time when
// the build ran in a git checkout with VCS stamping on (-buildvcs).
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// defaultVersion is Version when no -ldflags set it.
const defaultVersion = "0.1.0-dev"

// Set at build time with -ldflags -X (see the package comment).
var (
	// Version is relay's version, sent in the User-Agent header.
	Version = defaultVersion
	// Commit is the git commit relay was built from.
	Commit = ""
	// Date is when relay was built (RFC 3339, UTC).
	Date = ""
)

// Unknown stands for a commit or date neither -ldflags nor the build info gave.
const Unknown = "unknown"

// Info describes a relay binary.
type Info struct {
	Version string
	Commit  string // Unknown when not known
	// Modified: the commit had uncommitted changes (from the build info's
	// vcs.modified; -ldflags builds say so in Commit if they want to).
	Modified bool
	// Date is when relay was built, or without -ldflags the time of the
	// commit; Unknown when neither is known.
	Date      string
	GoVersion string // the toolchain that built relay, e.g. go1.26.8
	Platform  string // GOOS/GOARCH
}

// Get returns the version set at build time, completed from Go's build info.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(Version, Commit, Date, bi)
}

// resolve prefers what -ldflags set (version, commit, date) and takes the rest
// from bi (nil when the binary carries no build info).
func resolve(version, commit, date string, bi *debug.BuildInfo) Info {
	in := Info{Version: version, Commit: commit, Date: date, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
		// 'go install github.com/relaydev/relay/cmd/relay@v1.2.3' records
		// the module's version; a build in a checkout records "(devel)".
		if in.Version == defaultVersion && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = strings.TrimPrefix(bi.Main.Version, "v")
		}
		var rev, at string
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if in.Commit == "" && rev != "" {
			in.Commit, in.Modified = rev, modified
		}
		if in.Date == "" {
			in.Date = at
		}
	}
	if in.Commit == "" {
		in.Commit = Unknown
	}
	if in.Date == "" {
		in.Date = Unknown
	}
	return in
}

// String is what 'relay version' prints: the version on the first line, then
// the commit, the date and the Go toolchain.
func (in Info) String() string {
	commit := in.Commit
	if in.Modified {
		commit += " (modified)"
	}
	return fmt.Sprintf("relay version %s\ncommit: %s\ndate:   %s\ngo:     %s %s\n", in.Version, commit, in.Date, in.GoVersion, in.Platform)
}
