package integration

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// selfSigned writes a certificate for 127.0.0.1 and its key as PEM files
// into a temporary directory, and returns their paths and a client that
// trusts the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, client *http.Client) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "relay test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// TestAPIOverTLSSendsHSTS: 'relay run --api-tls-cert' answers the API and
// the dashboard with Strict-Transport-Security for a year, without
// includeSubDomains (TestEventPublishedOverHTTPIsDelivered checks that
// plain HTTP has none).
func TestAPIOverTLSSendsHSTS(t *testing.T) {
	t.Parallel()
	e := setup(t)
	certFile, keyFile, client := selfSigned(t)
	p := startProc(t, "--nats-url", e.url, "run", "--api-addr", "127.0.0.1:0", "--api-tls-cert", certFile, "--api-tls-key", keyFile)
	var base string
	eventually(t, 20*time.Second, func() bool {
		m := apiURLRE.FindStringSubmatch(p.output())
		if m != nil {
			base = m[1]
		}
		return m != nil && p.logged("relay running")
	}, "relay serves the API:\n%s", p.output())
	require.True(t, strings.HasPrefix(base, "https://"), base)
	root := strings.TrimSuffix(base, "/v1")
	for _, path := range []string{"/ui/login", "/v1/openapi.json", "/v1/stats"} {
		resp, err := client.Get(root + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, "max-age=31536000", resp.Header.Get("Strict-Transport-Security"), "%s answered %d", path, resp.StatusCode)
	}
}
