package quiet

import (
	"testing"
	"time"
)

func TestQuietLetsOneWarningThroughPerInterval(t *testing.T) {
	q := Limiter{Interval: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		key     string
		at      time.Duration
		ok      bool
		dropped int
	}{
		{"a", 0, true, 0},
		{"a", time.Second, false, 0},
		{"b", time.Second, true, 0}, // keys are apart
		{"a", 5 * time.Second, false, 0},
		{"a", 10 * time.Second, true, 2}, // the two held back are counted
		{"a", 11 * time.Second, false, 0},
		{"a", 30 * time.Second, true, 1},
	} {
		ok, dropped := q.Allow(c.key, t0.Add(c.at))
		if ok != c.ok || dropped != c.dropped {
			t.Errorf("%s at %s: %v, %d; want %v, %d", c.key, c.at, ok, dropped, c.ok, c.dropped)
		}
	}
}
