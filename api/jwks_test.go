package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/webhook"
)

// getJWKS fetches a key set without a key, with etag as If-None-Match
// when not "".
func (e *apiEnv) getJWKS(path, etag string) (*http.Response, webhook.JWKSet) {
	e.t.Helper()
	var hdr []string
	if etag != "" {
		hdr = []string{"If-None-Match", etag}
	}
	resp, body := e.exchange(http.MethodGet, path, "", "", nil, hdr...)
	var set webhook.JWKSet
	if resp.StatusCode == http.StatusOK {
		require.NoError(e.t, json.Unmarshal(body, &set), "%s", body)
	}
	return resp, set
}

func kids(set webhook.JWKSet) []string {
	var out []string
	for _, k := range set.Keys {
		out = append(out, k.Kid)
	}
	return out
}

// The JWKS lists the public keys in force of the destinations that sign
// v1a, per tenant, without an API key, cacheable; a rotation adds the new
// key while the old one still signs.
func TestJWKSPublishesTheKeysInForce(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	code, m := e.send("PUT", "/v1/tenants/acme", e.admin, `{"name":"Acme"}`)
	require.Equal(t, http.StatusCreated, code, m)
	code, edge := e.send("POST", "/v1/destinations", e.admin, `{"name":"edge","url":"https://example.com/in","signature":"ed25519"}`)
	require.Equal(t, http.StatusCreated, code, edge)
	require.Nil(t, edge["secret"], "ed25519 alone: no HMAC secret generated")
	require.Equal(t, "ed25519", edge["signature"])
	pks := edge["public_keys"].([]any)
	require.Len(t, pks, 1)
	edgeKey := pks[0].(map[string]any)
	require.True(t, strings.HasPrefix(edgeKey["key"].(string), "whpk_"))
	code, m = e.send("POST", "/v1/destinations", e.admin, `{"name":"plain","url":"https://example.com/in"}`)
	require.Equal(t, http.StatusCreated, code, m)
	require.Equal(t, "hmac", m["signature"])
	require.Nil(t, m["public_keys"])
	code, both := e.send("POST", "/v1/tenants/acme/destinations", e.admin, `{"name":"orders","url":"https://example.com/in","signature":"both"}`)
	require.Equal(t, http.StatusCreated, code, both)
	require.NotEmpty(t, both["secret"], "both: an HMAC secret too")

	resp, set := e.getJWKS("/v1/jwks.json", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "public, max-age=300", resp.Header.Get("Cache-Control"))
	require.Equal(t, []string{edgeKey["kid"].(string)}, kids(set), "no tenant's destinations: edge's key alone")
	pk, err := webhook.PublicKeyOfJWK(set.Keys[0])
	require.NoError(t, err)
	require.Equal(t, edgeKey["key"], pk)
	etag := resp.Header.Get("ETag")
	resp, _ = e.getJWKS("/v1/jwks.json", etag)
	require.Equal(t, http.StatusNotModified, resp.StatusCode)

	_, acme := e.getJWKS("/v1/tenants/acme/jwks.json", "")
	require.Equal(t, []string{both["public_keys"].([]any)[0].(map[string]any)["kid"].(string)}, kids(acme))
	resp, none := e.getJWKS("/v1/tenants/nobody/jwks.json", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, "a tenant that does not exist: an empty set, not a 404")
	require.Empty(t, none.Keys)

	// A rotation with an overlap: both keys, the new one first.
	code, rot := e.send("POST", "/v1/destinations/edge/rotate-secret", e.admin, `{"overlap":"1h"}`)
	require.Equal(t, http.StatusOK, code, rot)
	require.Nil(t, rot["secret"], "no HMAC secret to show")
	rotated := rot["public_keys"].([]any)
	require.Len(t, rotated, 2)
	require.Equal(t, edgeKey["kid"], rotated[1].(map[string]any)["kid"], "the old key second, with its end")
	require.NotEmpty(t, rotated[1].(map[string]any)["until"])
	resp, set = e.getJWKS("/v1/jwks.json", etag)
	require.Equal(t, http.StatusOK, resp.StatusCode, "changed: no 304")
	require.Equal(t, []string{rotated[0].(map[string]any)["kid"].(string), edgeKey["kid"].(string)}, kids(set))

	// A rotation without one: the old key is gone at once.
	code, rot = e.send("POST", "/v1/destinations/edge/rotate-secret", e.admin, `{"overlap":"0s"}`)
	require.Equal(t, http.StatusOK, code, rot)
	_, set = e.getJWKS("/v1/jwks.json", "")
	require.Len(t, set.Keys, 1)
	require.Equal(t, rot["public_keys"].([]any)[0].(map[string]any)["kid"], set.Keys[0].Kid)

	// An HMAC secret cannot be set on an ed25519 destination, nor revealed.
	code, m = e.send("POST", "/v1/destinations/edge/rotate-secret", e.admin, `{"secret":"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}`)
	require.Equal(t, http.StatusUnprocessableEntity, code, m)
	require.Contains(t, m["detail"], "signs with an Ed25519 key only")
	code, m = e.do("GET", "/v1/destinations/edge/secret", e.admin, "", nil)
	require.Equal(t, http.StatusNotFound, code, m)
	require.Contains(t, m["detail"], "no secret to reveal")

	// A bad signature or signing key says what was wrong.
	code, m = e.send("POST", "/v1/destinations", e.admin, `{"name":"bad","url":"https://example.com/in","signature":"rsa"}`)
	require.Equal(t, http.StatusUnprocessableEntity, code, m)
	require.Equal(t, "signature", m["field"])
	code, m = e.send("POST", "/v1/destinations", e.admin, `{"name":"bad","url":"https://example.com/in","signature":"ed25519","signing_key":"whsk_AAAA"}`)
	require.Equal(t, http.StatusUnprocessableEntity, code, m)
	require.Equal(t, "signing_key", m["field"])

	// Back to HMAC: a new secret, answered once, and no key published.
	code, m = e.send("PATCH", "/v1/destinations/edge", e.admin, `{"signature":"hmac"}`)
	require.Equal(t, http.StatusOK, code, m)
	require.True(t, strings.HasPrefix(m["secret"].(string), "whsec_"), "%v", m)
	require.Nil(t, m["public_keys"])
	_, set = e.getJWKS("/v1/jwks.json", "")
	require.Empty(t, set.Keys)

	// An HMAC destination moved to both gets a key, kept across updates.
	code, m = e.send("PATCH", "/v1/destinations/plain", e.admin, `{"signature":"both"}`)
	require.Equal(t, http.StatusOK, code, m)
	key := m["public_keys"].([]any)[0].(map[string]any)["kid"]
	code, m = e.send("PATCH", "/v1/destinations/plain", e.admin, `{"timeout":"5s"}`)
	require.Equal(t, http.StatusOK, code, m)
	require.Equal(t, key, m["public_keys"].([]any)[0].(map[string]any)["kid"])
}

func TestETagsCompareWeakly(t *testing.T) {
	t.Parallel()
	for header, want := range map[string]bool{`"abc"`: true, `W/"abc"`: true, `"x", W/"abc"`: true, `*`: true, `"abd"`: false, ``: false} {
		require.Equal(t, want, etagMatch(header, `"abc"`), header)
	}
}

// Many receivers at once, while destinations change: every answer is a
// whole set, and after a change through this server, the next answer has
// it.
func TestJWKSUnderConcurrentRequests(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := http.Get(e.url + "/v1/jwks.json")
				if err != nil {
					continue
				}
				var set webhook.JWKSet
				err = json.NewDecoder(resp.Body).Decode(&set)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || err != nil {
					t.Errorf("status %d, %v", resp.StatusCode, err)
					return
				}
			}
		})
	}
	for i := range 5 {
		name := "d" + strconv.Itoa(i)
		code, m := e.send("POST", "/v1/destinations", e.admin, `{"name":"`+name+`","url":"https://example.com/in","signature":"ed25519"}`)
		require.Equal(t, http.StatusCreated, code, m)
		_, set := e.getJWKS("/v1/jwks.json", "")
		require.Len(t, set.Keys, i+1, "the change is in the next answer")
	}
	close(stop)
	wg.Wait()
}

// A tenant's default signature: its new destinations sign as it says,
// unless they say otherwise (or give a secret, which is v1).
func TestTenantDefaultSignature(t *testing.T) {
	t.Parallel()
	e := startAPI(t)
	code, m := e.send("PUT", "/v1/tenants/acme", e.admin, `{"name":"Acme","defaults":{"signature":"rsa"}}`)
	require.Equal(t, http.StatusUnprocessableEntity, code, m)
	require.Equal(t, "defaults.signature", m["field"])
	code, m = e.send("PUT", "/v1/tenants/acme", e.admin, `{"name":"Acme","defaults":{"signature":"ed25519"}}`)
	require.Equal(t, http.StatusCreated, code, m)
	code, m = e.send("POST", "/v1/tenants/acme/destinations", e.admin, `{"name":"a","url":"https://example.com/in"}`)
	require.Equal(t, http.StatusCreated, code, m)
	require.Equal(t, "ed25519", m["signature"])
	require.Nil(t, m["secret"])
	code, m = e.send("POST", "/v1/tenants/acme/destinations", e.admin, `{"name":"b","url":"https://example.com/in","signature":"hmac"}`)
	require.Equal(t, http.StatusCreated, code, m)
	require.Equal(t, "hmac", m["signature"])
	code, m = e.send("POST", "/v1/tenants/acme/destinations", e.admin, `{"name":"c","url":"https://example.com/in","secret":"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}`)
	require.Equal(t, http.StatusCreated, code, m)
	require.Equal(t, "hmac", m["signature"], "a secret given: v1")
}
