package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRelayNotesReadTheCheckCounter: relay's check counter has no label
// since the check reads every event's headers; the note reads it, and
// still reads the labelled counters of older relay binaries.
func TestRelayNotesReadTheCheckCounter(t *testing.T) {
	page := ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(page)) }))
	t.Cleanup(srv.Close)
	b := &bench{hc: srv.Client()}
	p := &proc{metrics: strings.TrimPrefix(srv.URL, "http://")}

	page = "# HELP relay_unknown_destination_check_events_total x\nrelay_unknown_destination_check_events_total 50000\n"
	require.Equal(t, "unknown-destination check in this relay process: 50000 events read (their headers)", b.relayNotes(t.Context(), p)[0])

	page = `relay_unknown_destination_check_events_total{how="counted"} 7` + "\n" + `relay_unknown_destination_check_events_total{how="read"} 3` + "\n"
	require.Equal(t, "unknown-destination check in this relay process: 7 events counted, 0 listed, 3 read", b.relayNotes(t.Context(), p)[0])
}
