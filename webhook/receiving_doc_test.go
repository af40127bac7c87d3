package webhook

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The verification snippets of docs/receiving.md, run against requests
// relay signed. A block's fence names its language and, after a space,
// what it verifies: nothing for v1 (a secret), "v1a" for a public key,
// "jwks" for relay's key set. Each is run against a genuine request
// (with two signatures of its kind, as during a rotation, and one of the
// other kind), a tampered body, a wrong key and a stale timestamp.
func TestReceivingDocSnippets(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/receiving.md")
	require.NoError(t, err)
	blocks := map[string]string{}
	for _, m := range regexp.MustCompile("(?s)```((?:go|js|python)(?: v1a| jwks)?)\n(.*?)```").FindAllStringSubmatch(string(doc), -1) {
		require.NotContains(t, blocks, m[1], "docs/receiving.md has one ```%s block", m[1])
		blocks[m[1]] = m[2]
	}
	require.ElementsMatch(t, []string{"go", "js", "python", "go jwks", "js v1a", "python v1a"}, slices.Collect(maps.Keys(blocks)),
		"docs/receiving.md has a Go, a Node.js and a Python snippet for v1, Node.js and Python ones for v1a, and a Go one for the key set")

	// v1: the destination's secret, and the secret it had before.
	secret, oldSecret := GenerateSecret(), GenerateSecret()
	// v1a: the signing keys of a rotation (both in relay's key set), and a
	// key of someone else.
	newKey, oldKey, strangerKey := GenerateSigningKey(), GenerateSigningKey(), GenerateSigningKey()
	publicKey, err := PublicKey(newKey)
	require.NoError(t, err)
	var set JWKSet
	for _, k := range []string{oldKey, newKey} {
		pk, err := PublicKey(k)
		require.NoError(t, err)
		jwk, err := JWKOf(pk)
		require.NoError(t, err)
		set.Keys = append(set.Keys, jwk)
	}
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=300")
		_ = json.NewEncoder(w).Encode(set)
	}))
	t.Cleanup(jwks.Close)

	now := time.Now().Unix()
	body := `{"order":42,"note":"ünïcode"}`
	sign := func(key string, ts int64) string {
		var sig string
		var err error
		if strings.HasPrefix(key, SecretPrefix) {
			sig, err = Sign(key, "evt_1", ts, []byte(body))
		} else {
			sig, err = SignEd25519(key, "evt_1", ts, []byte(body))
		}
		require.NoError(t, err)
		return sig
	}
	fresh, stale := strconv.FormatInt(now, 10), strconv.FormatInt(now-600, 10)
	type input struct {
		name, ts, sig, body string
		ok                  bool
	}
	v1Cases := []input{
		{"genuine, two signatures", fresh, sign(oldSecret, now) + " " + sign(secret, now), body, true},
		{"genuine, both kinds", fresh, sign(newKey, now) + " " + sign(secret, now), body, true},
		{"tampered body", fresh, sign(secret, now), body + " ", false},
		{"other secret", fresh, sign(oldSecret, now) + " " + sign(newKey, now), body, false},
		{"stale timestamp", stale, sign(secret, now-600), body, false},
	}
	v1aCases := []input{
		{"genuine, a v1 and two v1a signatures", fresh, sign(secret, now) + " " + sign(oldKey, now) + " " + sign(newKey, now), body, true},
		{"genuine, after a malformed one", fresh, "v1a,A " + sign(newKey, now), body, true},
		{"tampered body", fresh, sign(newKey, now), body + " ", false},
		{"other key", fresh, sign(secret, now) + " " + sign(strangerKey, now), body, false},
		{"stale timestamp", stale, sign(newKey, now-600), body, false},
	}
	jwksCases := []input{
		{"genuine, a v1 and two v1a signatures", fresh, sign(secret, now) + " " + sign(oldKey, now) + " " + sign(newKey, now), body, true},
		{"genuine, the old key's", fresh, sign(oldKey, now), body, true},
		{"genuine, the new key's", fresh, sign(newKey, now), body, true},
		{"tampered body", fresh, sign(newKey, now), body + " ", false},
		{"key not in the set", fresh, sign(secret, now) + " " + sign(strangerKey, now), body, false},
		{"stale timestamp", stale, sign(newKey, now-600), body, false},
	}

	// A driver calls the snippet's function, FUNC, with the key in KEY and
	// the request in TS, SIG and BODY, and prints ok or invalid.
	drivers := map[string]string{
		"go": `
func main() {
	h := http.Header{}
	h.Set("webhook-id", "evt_1")
	h.Set("webhook-timestamp", os.Getenv("TS"))
	h.Set("webhook-signature", os.Getenv("SIG"))
	if verify(os.Getenv("KEY"), h, []byte(os.Getenv("BODY")), time.Now()) == nil {
		fmt.Print("ok")
	} else {
		fmt.Print("invalid")
	}
}
`,
		"go jwks": `
func main() {
	r := httptest.NewRequest("POST", "/", strings.NewReader(os.Getenv("BODY")))
	r.Header.Set("webhook-id", "evt_1")
	r.Header.Set("webhook-timestamp", os.Getenv("TS"))
	r.Header.Set("webhook-signature", os.Getenv("SIG"))
	w := httptest.NewRecorder()
	handler(func(string, []byte) error { return nil }).ServeHTTP(w, r)
	switch w.Code {
	case http.StatusNoContent:
		fmt.Print("ok")
	case http.StatusUnauthorized:
		fmt.Print("invalid")
	default:
		fmt.Print(w.Code, " ", w.Body.String())
	}
}
`,
		"js": `
const e = process.env;
const headers = {"webhook-id": "evt_1", "webhook-timestamp": e.TS, "webhook-signature": e.SIG};
process.stdout.write(FUNC(e.KEY, headers, Buffer.from(e.BODY, "utf8"), Math.floor(Date.now() / 1000)) ? "ok" : "invalid");
`,
		"python": `
import os, sys, time
e = os.environ
headers = {"webhook-id": "evt_1", "webhook-timestamp": e["TS"], "webhook-signature": e["SIG"]}
sys.stdout.write("ok" if FUNC(e["KEY"], headers, e["BODY"].encode("utf-8"), int(time.time())) else "invalid")
`,
	}
	for _, run := range []struct {
		name, block, fn, key string
		cases                []input
		env                  []string
	}{
		{"go", "go", "", secret, v1Cases, nil},
		{"go, public key", "go", "", publicKey, v1aCases, nil},
		{"go, key set", "go jwks", "", "", jwksCases, []string{"RELAY_JWKS_URL=" + jwks.URL}},
		{"js", "js", "verify", secret, v1Cases, nil},
		{"js, public key", "js v1a", "verifyEd25519", publicKey, v1aCases, nil},
		{"python", "python", "verify", secret, v1Cases, nil},
		{"python, public key", "python v1a", "verify_ed25519", publicKey, v1aCases, nil},
	} {
		t.Run(run.name, func(t *testing.T) {
			t.Parallel()
			lang, _, _ := strings.Cut(run.block, " ")
			bin := map[string]string{"go": "go", "js": "node", "python": "python3"}[lang]
			if _, err := exec.LookPath(bin); err != nil {
				t.Skipf("%s is not installed", bin)
			}
			if run.block == "python v1a" {
				if out, err := exec.Command("python3", "-c", "import cryptography").CombinedOutput(); err != nil {
					t.Skipf("Python's cryptography is not installed (pip install cryptography): %s", out)
				}
			}
			driver, ok := drivers[run.block]
			if !ok {
				driver = drivers[lang]
			}
			driver = strings.ReplaceAll(driver, "FUNC", run.fn)
			var args []string
			dir := t.TempDir()
			switch lang {
			case "go":
				bin = buildGoSnippet(t, blocks[run.block], driver)
			case "js":
				require.NoError(t, os.WriteFile(filepath.Join(dir, "verify.js"), []byte(blocks[run.block]+driver), 0o644))
				args = []string{"verify.js"}
			case "python":
				require.NoError(t, os.WriteFile(filepath.Join(dir, "verify.py"), []byte(blocks[run.block]+driver), 0o644))
				args = []string{"verify.py"}
			}
			for _, c := range run.cases {
				cmd := exec.Command(bin, args...)
				cmd.Dir = dir
				cmd.Env = append(os.Environ(), "KEY="+run.key, "TS="+c.ts, "SIG="+c.sig, "BODY="+c.body)
				cmd.Env = append(cmd.Env, run.env...)
				out, err := cmd.CombinedOutput()
				require.NoError(t, err, "%s: %s", c.name, out)
				want := map[bool]string{true: "ok", false: "invalid"}[c.ok]
				require.Equal(t, want, string(out), c.name)
			}
		})
	}
}

// buildGoSnippet builds a Go snippet and its driver as a program: the
// snippet's imports, plus those the driver needs, built in this module
// (testdata is no package of it) so that it imports this package as a
// receiver would. It returns the program's path.
func buildGoSnippet(t *testing.T, snippet, driver string) string {
	t.Helper()
	var extra []string
	for _, pkg := range []string{"fmt", "net/http", "net/http/httptest", "os", "strings", "time"} {
		if strings.Contains(driver, filepath.Base(pkg)+".") && !strings.Contains(snippet, strconv.Quote(pkg)) {
			extra = append(extra, "\t"+strconv.Quote(pkg))
		}
	}
	src := "package main\n\n" + strings.Replace(snippet, "import (", "import (\n"+strings.Join(extra, "\n"), 1) + driver
	require.NoError(t, os.MkdirAll("testdata", 0o755))
	dir, err := os.MkdirTemp("testdata", "snippet-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	dir, err = filepath.Abs(dir)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644))
	build := exec.Command("go", "build", "-o", "snippet", ".")
	build.Dir = dir
	out, err := build.CombinedOutput()
	require.NoError(t, err, "the Go snippet does not build: %s\n%s", out, src)
	return filepath.Join(dir, "snippet")
}
