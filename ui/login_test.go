package ui_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// loginForm loads the sign-in page as a browser would, and returns its
// pre-session cookie and the form's CSRF token.
func loginForm(t *testing.T, base string) (*http.Cookie, string) {
	t.Helper()
	resp, err := http.Get(base + "/ui/login")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	m := csrfField.FindStringSubmatch(string(body))
	require.NotNil(t, m, "the sign-in form has a CSRF token:\n%s", body)
	for _, c := range resp.Cookies() {
		if c.Name == "relay_login" {
			require.True(t, c.HttpOnly)
			require.Equal(t, http.SameSiteStrictMode, c.SameSite)
			require.Equal(t, "/ui/login", c.Path)
			return c, m[1]
		}
	}
	t.Fatalf("the sign-in page set no relay_login cookie: %v", resp.Header["Set-Cookie"])
	return nil, ""
}

// postLogin posts the sign-in form with key and token, the cookie when not
// nil, and the headers hdr (name, value, ...); it does not follow the
// redirect.
func postLogin(t *testing.T, base, key, token string, cookie *http.Cookie, hdr ...string) (*http.Response, string) {
	t.Helper()
	form := url.Values{"key": {key}}
	if token != "" {
		form.Set("csrf", token)
	}
	req, err := http.NewRequest(http.MethodPost, base+"/ui/login", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if cookie != nil {
		req.AddCookie(&http.Cookie{Name: cookie.Name, Value: cookie.Value})
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}

func sessionCookie(resp *http.Response) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == "relay_session" && c.Value != "" {
			return c
		}
	}
	return nil
}

// TestSignInTakesOnlyTheDashboardsOwnForm: a sign-in posted without the
// form's CSRF token, with another browser's token, or from another origin
// is refused (403, saying why) and starts no session; the form the
// dashboard served signs in.
func TestSignInTakesOnlyTheDashboardsOwnForm(t *testing.T) {
	t.Parallel()
	e := startDash(t)
	cookie, token := loginForm(t, e.url)
	otherCookie, otherToken := loginForm(t, e.url)
	require.NotEqual(t, cookie.Value, otherCookie.Value)
	require.NotEqual(t, token, otherToken)

	for _, tc := range []struct {
		name   string
		token  string
		cookie *http.Cookie
		hdr    []string
		want   string
	}{
		{"no token, no cookie (a form on another site)", "", nil, nil, "CSRF check failed"},
		{"the cookie without the token", "", cookie, nil, "CSRF check failed"},
		{"the token without the cookie", token, nil, nil, "CSRF check failed"},
		{"another browser's token", otherToken, cookie, nil, "CSRF check failed"},
		{"a cross-site page", token, cookie, []string{"Sec-Fetch-Site", "cross-site"}, "another site or origin"},
		{"a sibling host", token, cookie, []string{"Sec-Fetch-Site", "same-site"}, "another site or origin"},
		{"another origin, without Sec-Fetch-Site", token, cookie, []string{"Origin", "http://evil.example"}, "another site or origin"},
	} {
		resp, body := postLogin(t, e.url, e.admin, tc.token, tc.cookie, tc.hdr...)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s: %s", tc.name, body)
		require.Contains(t, body, tc.want, tc.name)
		require.Nil(t, sessionCookie(resp), "%s: no session", tc.name)
	}

	// The form as the dashboard served it, from its own origin.
	resp, body := postLogin(t, e.url, e.admin, token, cookie, "Sec-Fetch-Site", "same-origin", "Origin", e.url)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	require.Equal(t, "/ui/", resp.Header.Get("Location"))
	require.NotNil(t, sessionCookie(resp), "signed in")

	// A wrong key is still told so, with a form that can be sent again.
	resp, body = postLogin(t, e.url, e.admin+"x", otherToken, otherCookie)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "not valid")
	require.Contains(t, body, `name="csrf" value="`+otherToken+`"`)
	require.Nil(t, sessionCookie(resp))
}

// TestAPageElsewhereCannotSignTheBrowserIn: a page of another site whose
// form posts the attacker's key to the dashboard leaves the browser signed
// out (login CSRF), and the dashboard's own form still signs in.
func TestAPageElsewhereCannotSignTheBrowserIn(t *testing.T) {
	t.Parallel()
	e := startDash(t)
	// Another site: "localhost" is not the site of the dashboard's
	// 127.0.0.1.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><form method="post" action="%s/ui/login"><input type="hidden" name="key" value="%s"><button id="go" type="submit">win a prize</button></form>`, e.url, e.read)
	}))
	t.Cleanup(evil.Close)
	evilURL := strings.Replace(evil.URL, "127.0.0.1", "localhost", 1)

	p := openBrowser(t)
	p.do(chromedp.Navigate(evilURL), chromedp.WaitVisible(chromedp.ID("go")), chromedp.Click(chromedp.ID("go")))
	p.waitFor(`location.origin === ` + jsString(e.url) + ` && document.readyState === "complete"`)
	answer, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.body.innerText`))
	require.NoError(t, err)
	// The user comes to the dashboard next: not signed in with the
	// attacker's key.
	p.do(chromedp.Navigate(e.url + "/ui/"))
	p.waitFor(`document.querySelector("h1") !== null`)
	path, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`location.pathname`))
	require.NoError(t, err)
	require.Equal(t, "/ui/login", path, "signed in by the other site's form (nav: %s)", p.text("nav"))
	require.Contains(t, answer, "posted from a page of another site")

	p.signIn(e.url, e.admin)
	p.waitFor(`location.pathname === "/ui/" && document.querySelector("h1").textContent === "Overview"`)
	require.Contains(t, p.text("nav"), "Sign out ops")
}
