package ui_test

import (
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/publish"
)

// signInHTTP is an HTTP client signed in to the dashboard with key, through
// its sign-in form.
func signInHTTP(t *testing.T, base, key string) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar}
	_, page := get(t, c, base+"/ui/login")
	m := csrfField.FindStringSubmatch(page)
	require.NotNil(t, m, page)
	resp, err := c.PostForm(base+"/ui/login", url.Values{"key": {key}, "csrf": {m[1]}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "/ui/", resp.Request.URL.Path, "signed in")
	return c
}

// get is GET url's answer and its body.
func get(t *testing.T, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

var (
	downloadLink = regexp.MustCompile(`<a href="([^"]+)" id="download-body"`)
	letterLink   = regexp.MustCompile(`href="(/ui/dead-letters/[0-9]+)"`)
)

// TestDeepBodyIsPreviewedAndDownloadedWhole: an event of thousands of
// nested arrays (dead-lettered) is shown on its event and dead-letter
// pages as a bounded preview that says it was cut; its download, for a
// signed-in key (read scope is enough) and no one else, is the exact
// bytes, as a file the browser neither renders nor sniffs.
func TestDeepBodyIsPreviewedAndDownloadedWhole(t *testing.T) {
	t.Parallel()
	e := startDash(t)
	e.sink.setAnswer(func(*http.Request) int { return 400 })
	e.addDest(destination.Destination{Name: "crm"})
	const depth = 4000 // json.Indent made each page of it 32 MB
	deep := []byte(strings.Repeat("[", depth) + " " + strings.Repeat("]", depth))
	id := e.publish(publish.Event{Dest: "crm", ID: "evt-deep/1", Data: deep})
	c := signInHTTP(t, e.url, e.read)

	eventPage := e.url + "/ui/events?id=" + url.QueryEscape(id)
	var page string
	deadline := time.Now().Add(30 * time.Second)
	for {
		var resp *http.Response
		resp, page = get(t, c, eventPage)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		if strings.Contains(page, "state-dead") && letterLink.MatchString(mustGetLetters(t, c, e.url)) {
			break
		}
		require.False(t, time.Now().After(deadline), "the event was never dead-lettered")
		time.Sleep(50 * time.Millisecond)
	}
	_, letters := get(t, c, e.url+"/ui/dead-letters?dest=crm")
	letterPage := e.url + letterLink.FindStringSubmatch(letters)[1]
	_, letter := get(t, c, letterPage)

	for name, page := range map[string]string{"event": page, "dead letter": letter} {
		require.Less(t, len(page), 256<<10, "the %s page is bounded", name)
		require.Contains(t, page, "Nested deeper than 32 levels", name)
		require.Contains(t, page, "[...]", name)
		m := downloadLink.FindStringSubmatch(page)
		require.NotNil(t, m, "the %s page offers the body", name)
		resp, body := get(t, c, e.url+html.UnescapeString(m[1]))
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.Equal(t, string(deep), body, "the %s's download is the exact bytes", name)
		require.Equal(t, "application/octet-stream", resp.Header.Get("Content-Type"))
		require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
		require.True(t, strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment; filename="), resp.Header.Get("Content-Disposition"))

		// Without a session: the sign-in page, not the body.
		noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, body = get(t, noRedirect, e.url+html.UnescapeString(m[1]))
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, "/ui/login", resp.Header.Get("Location"))
		require.NotContains(t, body, "[[[")
	}
}

func mustGetLetters(t *testing.T, c *http.Client, base string) string {
	t.Helper()
	_, page := get(t, c, base+"/ui/dead-letters?dest=crm")
	return page
}
