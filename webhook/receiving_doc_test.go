package webhook

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The verification snippets of docs/receiving.md, run against requests
// relay signed: a genuine one (with two signatures, as during a rotation),
// a tampered body, a wrong secret and a stale timestamp.
func TestReceivingDocSnippets(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/receiving.md")
	require.NoError(t, err)
	blocks := map[string]string{}
	for _, m := range regexp.MustCompile("(?s)```(go|js|python)\n(.*?)```").FindAllStringSubmatch(string(doc), -1) {
		blocks[m[1]] = m[2]
	}
	require.Len(t, blocks, 3, "docs/receiving.md has a Go, a Node.js and a Python snippet")

	secret, other := GenerateSecret(), GenerateSecret()
	now := time.Now().Unix()
	body := `{"order":42,"note":"ünïcode"}`
	sig, err := Sign(secret, "evt_1", now, []byte(body))
	require.NoError(t, err)
	oldSig, err := Sign(other, "evt_1", now, []byte(body))
	require.NoError(t, err)
	staleSig, err := Sign(secret, "evt_1", now-600, []byte(body))
	require.NoError(t, err)
	type input struct {
		name, ts, sig, body string
		ok                  bool
	}
	cases := []input{
		{"genuine, two signatures", strconv.FormatInt(now, 10), oldSig + " " + sig, body, true},
		{"tampered body", strconv.FormatInt(now, 10), sig, body + " ", false},
		{"other secret", strconv.FormatInt(now, 10), oldSig, body, false},
		{"stale timestamp", strconv.FormatInt(now-600, 10), staleSig, body, false},
	}

	drivers := map[string]struct {
		bin, file string
		args      []string
		driver    string
	}{
		"go": {bin: "go", file: "main.go", args: []string{"run", "main.go"}, driver: `
func main() {
	h := http.Header{}
	h.Set("webhook-id", "evt_1")
	h.Set("webhook-timestamp", os.Getenv("TS"))
	h.Set("webhook-signature", os.Getenv("SIG"))
	if verify(os.Getenv("SECRET"), h, []byte(os.Getenv("BODY")), time.Now()) == nil {
		fmt.Print("ok")
	} else {
		fmt.Print("invalid")
	}
}
`},
		"js": {bin: "node", file: "verify.js", args: []string{"verify.js"}, driver: `
const e = process.env;
const headers = {"webhook-id": "evt_1", "webhook-timestamp": e.TS, "webhook-signature": e.SIG};
process.stdout.write(verify(e.SECRET, headers, Buffer.from(e.BODY, "utf8"), Math.floor(Date.now() / 1000)) ? "ok" : "invalid");
`},
		"python": {bin: "python3", file: "verify.py", args: []string{"verify.py"}, driver: `
import os, sys, time
e = os.environ
headers = {"webhook-id": "evt_1", "webhook-timestamp": e["TS"], "webhook-signature": e["SIG"]}
sys.stdout.write("ok" if verify(e["SECRET"], headers, e["BODY"].encode("utf-8"), int(time.time())) else "invalid")
`},
	}
	for lang, d := range drivers {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			if _, err := exec.LookPath(d.bin); err != nil {
				t.Skipf("%s is not installed", d.bin)
			}
			dir := t.TempDir()
			src := blocks[lang] + d.driver
			bin, args := d.bin, d.args
			if lang == "go" {
				// The snippet's imports, plus the driver's, built in this
				// module (testdata is no package of it) so that it imports
				// this package as a receiver would.
				src = "package main\n\n" + strings.Replace(blocks[lang], "import (", "import (\n\t\"fmt\"\n\t\"os\"", 1) + d.driver
				require.NoError(t, os.MkdirAll("testdata", 0o755))
				var err error
				dir, err = os.MkdirTemp("testdata", "snippet-")
				require.NoError(t, err)
				t.Cleanup(func() { _ = os.RemoveAll(dir) })
				dir, err = filepath.Abs(dir)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join(dir, d.file), []byte(src), 0o644))
				build := exec.Command("go", "build", "-o", "snippet", ".")
				build.Dir = dir
				out, err := build.CombinedOutput()
				require.NoError(t, err, "the Go snippet does not build: %s", out)
				bin, args = filepath.Join(dir, "snippet"), nil
			}
			require.NoError(t, os.WriteFile(filepath.Join(dir, d.file), []byte(src), 0o644))
			for _, c := range cases {
				cmd := exec.Command(bin, args...)
				cmd.Dir = dir
				cmd.Env = append(os.Environ(), "SECRET="+secret, "TS="+c.ts, "SIG="+c.sig, "BODY="+c.body)
				out, err := cmd.CombinedOutput()
				require.NoError(t, err, "%s: %s", c.name, out)
				want := map[bool]string{true: "ok", false: "invalid"}[c.ok]
				require.Equal(t, want, string(out), c.name)
			}
		})
	}
}
