package replica

import "net/http"

// hsts is the Strict-Transport-Security relay sends when it serves the API
// and the dashboard over TLS itself (--api-tls-cert): for a year, browsers
// that saw it go to this host over HTTPS only, so a network attacker can
// no longer strip TLS from a later visit and read a sign-in or a session
// cookie. No includeSubDomains: relay owns its host name, not the domain
// around it, and a header that forced HTTPS on every sibling host could
// break sites relay knows nothing of. No preload, for the same reason.
const hsts = "max-age=31536000"

// withHSTS adds Strict-Transport-Security to every answer h gives to a
// request that came over TLS; over plain HTTP the header means nothing to
// a browser (RFC 6797 8.1) and is not sent.
func withHSTS(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil {
			w.Header().Set("Strict-Transport-Security", hsts)
		}
		h.ServeHTTP(w, r)
	})
}
