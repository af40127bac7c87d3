package ui

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/relaydev/relay/api/client"
)

// apiFor is the HTTP API's Go client with the signed-in user's key, on
// behalf of from, the browser's request. It calls the API in process,
// through its handler: the dashboard has no other way to the data, and the
// API checks the key, its scope and every input as for any client.
func (u *UI) apiFor(from *http.Request, key string) *client.Client {
	return inProcessClient(u.cfg.API, from, key)
}

// inProcessClient is the Go client of API h with key, on behalf of from.
func inProcessClient(h http.Handler, from *http.Request, key string) *client.Client {
	c, err := client.New("http://relay.internal", key, client.WithHTTPClient(&http.Client{Transport: inProcess{h: h, remote: from.RemoteAddr}}))
	if err != nil {
		panic(err) // a constant URL: cannot fail
	}
	return c
}

// inProcess is a RoundTripper that serves each request with h, as if from
// remote (the API limits failed keys per client address).
type inProcess struct {
	h      http.Handler
	remote string
}

func (t inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.RemoteAddr = t.remote
	req.RequestURI = req.URL.RequestURI()
	rec := &recorder{hdr: http.Header{}}
	t.h.ServeHTTP(rec, req)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return &http.Response{
		Status: strconv.Itoa(rec.status) + " " + http.StatusText(rec.status), StatusCode: rec.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: rec.hdr, Body: io.NopCloser(&rec.body), ContentLength: int64(rec.body.Len()), Request: req,
	}, nil
}

// recorder is the response of an in-process call.
type recorder struct {
	hdr    http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.hdr }
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

// statusOf is the HTTP status of a problem the API answered, 0 for any
// other error.
func statusOf(err error) int {
	var e *client.Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}
