package version

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestResolve(t *testing.T) {
	t.Parallel()

	vcs := func(main string, settings ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "github.com/relaydev/relay", Version: main}}
		for i := 0; i < len(settings); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return bi
	}
	const rev = "0123456789abcdef0123456789abcdef01234567"

	for _, tc := range []struct {
		name                  string
		version, commit, date string
		bi                    *debug.BuildInfo
		want                  Info
	}{
		{
			name:    "ldflags win over the build info",
			version: "1.2.3", commit: "abc", date: "2026-01-02T03:04:05Z",
			bi:   vcs("v9.9.9", "vcs.revision", rev, "vcs.time", "2020-01-01T00:00:00Z", "vcs.modified", "true"),
			want: Info{Version: "1.2.3", Commit: "abc", Date: "2026-01-02T03:04:05Z", GoVersion: "go1.99.1"},
		},
		{
			name:    "a checkout with VCS stamping",
			version: defaultVersion,
			bi:      vcs("(devel)", "vcs.revision", rev, "vcs.time", "2026-05-06T07:08:09Z", "vcs.modified", "true"),
			want:    Info{Version: defaultVersion, Commit: rev, Modified: true, Date: "2026-05-06T07:08:09Z", GoVersion: "go1.99.1"},
		},
		{
			name:    "go install at a tag",
			version: defaultVersion,
			bi:      vcs("v1.4.0"),
			want:    Info{Version: "1.4.0", Commit: Unknown, Date: Unknown, GoVersion: "go1.99.1"},
		},
		{
			name:    "-buildvcs=false: nothing but the Go version",
			version: defaultVersion,
			bi:      vcs("(devel)"),
			want:    Info{Version: defaultVersion, Commit: Unknown, Date: Unknown, GoVersion: "go1.99.1"},
		},
		{
			name:    "no build info at all",
			version: defaultVersion,
			want:    Info{Version: defaultVersion, Commit: Unknown, Date: Unknown, GoVersion: runtime.Version()},
		},
		{
			name:    "ldflags commit, date from the build info",
			version: "1.2.3", commit: "abc",
			bi:   vcs("(devel)", "vcs.revision", rev, "vcs.time", "2026-05-06T07:08:09Z"),
			want: Info{Version: "1.2.3", Commit: "abc", Date: "2026-05-06T07:08:09Z", GoVersion: "go1.99.1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.want.Platform = runtime.GOOS + "/" + runtime.GOARCH
			require.Equal(t, tc.want, resolve(tc.version, tc.commit, tc.date, tc.bi))
		})
	}
}

func TestString(t *testing.T) {
	t.Parallel()
	in := Info{Version: "1.2.3", Commit: "abc", Modified: true, Date: "2026-01-02T03:04:05Z", GoVersion: "go1.26.8", Platform: "linux/amd64"}
	require.Equal(t, "relay version 1.2.3\ncommit: abc (modified)\ndate:   2026-01-02T03:04:05Z\ngo:     go1.26.8 linux/amd64\n", in.String())
}
