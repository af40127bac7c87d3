package integration

import (
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// docBlock is the fenced block of language lang in doc.
func docBlock(t *testing.T, doc []byte, lang string) string {
	t.Helper()
	m := regexp.MustCompile("(?s)```" + lang + "\n(.*?)```").FindSubmatch(doc)
	require.NotNil(t, m, "docs/portal.md has a %s block", lang)
	return string(m[1])
}

// The examples of docs/portal.md, run as written against 'relay run': the
// curl command and the Go program mint links, and each link signs a
// browser in (its token exchanged for the session cookie) on the portal
// relay serves.
func TestPortalDocExamples(t *testing.T) {
	t.Parallel()
	e := setup(t)
	code, out := e.relayCLI("tenant", "put", "acme")
	require.Equal(t, 0, code, out)
	code, out = e.relayCLI("api-key", "create", "--name", "backend", "--scope", "admin")
	require.Equal(t, 0, code, out)
	key := regexp.MustCompile(`relay_[0-9a-f]{16}_\S+`).FindString(out)
	require.NotEmpty(t, key, out)
	p := startProc(t, "--nats-url", e.url, "run", "--api-addr", "127.0.0.1:0")
	var base string
	eventually(t, 20*time.Second, func() bool {
		if m := apiURLRE.FindStringSubmatch(p.output()); m != nil {
			base = strings.TrimSuffix(m[1], "/v1")
		}
		return base != "" && p.logged("relay running")
	}, "relay serves the API:\n%s", p.output())
	doc, err := os.ReadFile("../docs/portal.md")
	require.NoError(t, err)
	env := append(os.Environ(), "RELAY_URL="+base, "RELAY_API_KEY="+key)

	var links []string
	sh := exec.Command("bash", "-c", docBlock(t, doc, "sh"))
	sh.Env = env
	b, err := sh.CombinedOutput()
	require.NoError(t, err, "%s", b)
	var minted map[string]any
	require.NoError(t, json.Unmarshal(b, &minted), "%s", b)
	require.ElementsMatch(t, []any{"manage_endpoints", "view_secret", "replay"}, minted["capabilities"])
	links = append(links, minted["url"].(string))

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(docBlock(t, doc, "go")), 0o644))
	run := exec.Command("go", "run", "main.go")
	run.Dir, run.Env = dir, append(env, "GOFLAGS=-mod=mod", "GO111MODULE=on", "GOWORK=off")
	b, err = run.CombinedOutput()
	require.NoError(t, err, "%s", b)
	links = append(links, strings.TrimSpace(string(b)))

	for _, link := range links {
		require.True(t, strings.HasPrefix(link, base+"/portal/signin/acme#token=rpl_"), link)
		page, token, _ := strings.Cut(link, "#token=")
		res, err := http.Get(page)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.Equal(t, "DENY", res.Header.Get("X-Frame-Options"), "no origin may frame it")

		jar, _ := cookiejar.New(nil)
		c := &http.Client{Jar: jar}
		body, _ := json.Marshal(map[string]string{"token": token})
		res, err = c.Post(base+"/portal/session", "application/json", strings.NewReader(string(body)))
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, link)
		res, err = c.Get(base + "/portal/endpoints")
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, "signed in by %s", link)
	}
}
