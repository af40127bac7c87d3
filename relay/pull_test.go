package relay

import (
	"testing"
	"time"
)

func TestArrivalsBoundEachEventsArrival(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	a := newArrivals(3, t0)
	// Taken at 1..6 s. With a window of 3, the event taken at 4 s arrived
	// after the one taken 3 places before it (at 1 s) was taken; the first
	// three arrived after the client started asking.
	want := []time.Time{t0, t0, t0, at(1), at(2), at(3)}
	for i, w := range want {
		if got := a.taken(at(i + 1)); !got.Equal(w) {
			t.Errorf("event %d, taken at %ds: bound %v, want %v", i+1, i+1, got.Sub(t0), w.Sub(t0))
		}
	}
	if got := newArrivals(0, t0).taken(at(5)); !got.Equal(t0) {
		t.Errorf("a window of 0 is taken as 1: first bound %v, want the start", got.Sub(t0))
	}
}
