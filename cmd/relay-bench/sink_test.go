package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLateAnswersAreGroupedIntoSpells(t *testing.T) {
	ms := int64(time.Millisecond)
	t0 := int64(1_000_000) * ms
	var lat, pub []int64
	at := func(offsetMs, latMs int64) {
		pub = append(pub, t0+offsetMs*ms)
		lat = append(lat, latMs*ms)
	}
	at(0, 1)
	// A spell of three late events published within 50ms of each other.
	at(1000, 20)
	at(1040, 30)
	at(1080, 15)
	at(1100, 2) // on time: does not end the spell
	// 200ms later: a spell of its own.
	at(1280, 12)
	at(2000, 10) // exactly 10ms is not late

	ls := late(lat, pub)
	require.Equal(t, 4, ls.Events)
	require.Equal(t, 2, ls.Spells)
	require.Equal(t, 3, ls.WorstEvents)
	require.InDelta(t, 1.0, ls.WorstAtSecs, 1e-9)
	require.InDelta(t, 80.0, ls.WorstOverMs, 1e-9)
	require.InDelta(t, 30.0, ls.WorstMaxMs, 1e-9)

	require.Equal(t, lateSpells{}, late([]int64{ms}, []int64{t0}))
	require.Contains(t, lateSpells{}.String(), "no answer later than 10ms")
}

// TestSinkCountsEachDestinationsCopyOnce: a fanned-out event reaches every
// subscriber with the same webhook-id. The sink counts a delivery per
// (destination, webhook-id), so the copies of one event are deliveries, not
// duplicates; a second 2xx for the same pair is a duplicate.
func TestSinkCountsEachDestinationsCopyOnce(t *testing.T) {
	srv := httptest.NewServer(newSinkServer())
	t.Cleanup(srv.Close)
	post := func(dest, id string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/d/"+dest, strings.NewReader(`{"ts":1,"id":"`+id+`"}`))
		require.NoError(t, err)
		req.Header.Set("webhook-id", id)
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
	}
	stats := func() sinkStats {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL + "/stats")
		require.NoError(t, err)
		defer resp.Body.Close()
		var st sinkStats
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
		return st
	}

	for _, d := range []string{"g10-0", "g10-1", "g10-2"} {
		post(d, "evt-1")
	}
	post("g10-0", "evt-2")
	st := stats()
	require.Equal(t, int64(4), st.Delivered, "one event to three subscribers and another to one")
	require.Equal(t, int64(0), st.Duplicates, "the same webhook-id at another destination is no duplicate")
	require.Equal(t, map[string]int64{"g10-0": 2, "g10-1": 1, "g10-2": 1}, st.ByDest)
	require.Zero(t, st.LastDuplicateNs)

	before := time.Now().UnixNano()
	post("g10-1", "evt-1") // the same destination again: a duplicate
	st = stats()
	require.Equal(t, int64(4), st.Delivered)
	require.Equal(t, int64(1), st.Duplicates)
	require.GreaterOrEqual(t, st.LastDuplicateNs, before, "when the duplicate came")
	require.LessOrEqual(t, st.LastDuplicateNs, time.Now().UnixNano())
	require.Equal(t, int64(5), st.Requests)
}
