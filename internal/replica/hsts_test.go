package replica

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHSTSOnlyOverTLS: an answer over TLS carries Strict-Transport-Security
// (without includeSubDomains), whatever the handler answered; one over
// plain HTTP does not. 'relay run --api-tls-cert' itself is checked by
// the integration test TestAPIOverTLSSendsHSTS.
func TestHSTSOnlyOverTLS(t *testing.T) {
	t.Parallel()
	h := withHSTS(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such page", http.StatusNotFound)
	}))
	tlsSrv := httptest.NewTLSServer(h)
	t.Cleanup(tlsSrv.Close)
	resp, err := tlsSrv.Client().Get(tlsSrv.URL + "/ui/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Equal(t, "max-age=31536000", resp.Header.Get("Strict-Transport-Security"))

	plain := httptest.NewServer(h)
	t.Cleanup(plain.Close)
	resp, err = http.Get(plain.URL + "/ui/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Empty(t, resp.Header.Values("Strict-Transport-Security"))
}
