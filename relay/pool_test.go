package relay

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/relaydev/relay/destination"
	"github.com/stretchr/testify/require"
)

func poolDest(strategy string, urls ...string) destination.Destination {
	d := destination.Destination{Name: "d", URLStrategy: strategy}
	d.SetPool(urls)
	return d.WithDefaults()
}

// Failover: attempts go to the first URL until it fails three times in a
// row, then to the next one while it cools down; after the cool-down one
// attempt probes it, and a failed probe cools it down again for twice as
// long (up to 8 times the first), a successful one brings every attempt
// back to it.
func TestFailoverCoolsAFailingURLDown(t *testing.T) {
	t.Parallel()
	p := newURLPools(time.Minute)
	d := poolDest(destination.URLFailover, "http://a.test/", "http://b.test/")
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

	for i := range urlFailuresToCool {
		require.Equal(t, 0, p.pick(d, t0), "failure %d", i+1)
		p.report(d, 0, Failing, t0)
	}
	require.Equal(t, 1, p.pick(d, t0), "the first URL cools down")
	p.report(d, 1, Healthy, t0)
	// An attempt that started before the URL cooled down and fails after
	// does not make the cool-down longer.
	p.report(d, 0, Failing, t0.Add(time.Second))
	require.Equal(t, 1, p.pick(d, t0.Add(time.Minute-time.Nanosecond)))
	p.report(d, 1, Healthy, t0)

	// The cool-down is over: one attempt probes the first URL, the others
	// keep going to the second meanwhile.
	t1 := t0.Add(time.Minute)
	require.Equal(t, 0, p.pick(d, t1), "the probe")
	require.Equal(t, 1, p.pick(d, t1), "while the probe runs")
	p.report(d, 1, Healthy, t1)
	p.report(d, 0, Failing, t1)
	require.Equal(t, 1, p.pick(d, t1.Add(2*time.Minute-time.Nanosecond)), "a failed probe: cooling down twice as long")
	p.report(d, 1, Healthy, t1)

	cooldowns := []time.Duration{4 * time.Minute, 8 * time.Minute, 8 * time.Minute}
	t2 := t1.Add(2 * time.Minute)
	for _, c := range cooldowns {
		require.Equal(t, 0, p.pick(d, t2))
		p.report(d, 0, Failing, t2)
		require.Equal(t, 1, p.pick(d, t2.Add(c-time.Nanosecond)), "cooling down for %s", c)
		p.report(d, 1, Healthy, t2)
		t2 = t2.Add(c)
	}

	require.Equal(t, 0, p.pick(d, t2), "a probe")
	p.report(d, 0, Healthy, t2)
	for range 5 {
		require.Equal(t, 0, p.pick(d, t2), "back to the first URL")
		p.report(d, 0, Healthy, t2)
	}
	// A success reset it: three failures again before it cools down.
	for range urlFailuresToCool - 1 {
		require.Equal(t, 0, p.pick(d, t2))
		p.report(d, 0, Failing, t2)
	}
	require.Equal(t, 0, p.pick(d, t2))
}

// When every URL cools down, the one whose cool-down ends first takes the
// attempt: the pool never holds an event back.
func TestEveryURLCoolingDownUsesTheOneThatEndsFirst(t *testing.T) {
	t.Parallel()
	p := newURLPools(time.Minute)
	d := poolDest(destination.URLFailover, "http://a.test/", "http://b.test/", "http://c.test/")
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	p.pick(d, t0)
	for _, i := range []int{2, 0, 1} { // URL 2 cools down first, then 0, then 1
		at := t0.Add(time.Duration(i+1) * time.Second)
		if i == 2 {
			at = t0
		}
		for range urlFailuresToCool {
			p.report(d, i, Failing, at)
		}
	}
	require.Equal(t, 2, p.pick(d, t0.Add(10*time.Second)))
}

// Round-robin spreads the attempts over the URLs in turn, skipping one that
// cools down.
func TestRoundRobinTakesTurnsAndSkipsACoolingURL(t *testing.T) {
	t.Parallel()
	p := newURLPools(time.Minute)
	d := poolDest(destination.URLRoundRobin, "http://a.test/", "http://b.test/", "http://c.test/")
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var got []int
	for range 6 {
		got = append(got, p.pick(d, t0))
	}
	require.Equal(t, []int{0, 1, 2, 0, 1, 2}, got)
	for range urlFailuresToCool {
		p.report(d, 1, Failing, t0)
	}
	got = got[:0]
	for range 4 {
		got = append(got, p.pick(d, t0))
	}
	require.Equal(t, []int{0, 2, 0, 2}, got)
}

// A changed pool starts afresh; a destination with one URL always uses it.
func TestChangedPoolStartsAfresh(t *testing.T) {
	t.Parallel()
	p := newURLPools(time.Minute)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	d := poolDest(destination.URLFailover, "http://a.test/", "http://b.test/")
	for range urlFailuresToCool {
		require.Equal(t, 0, p.pick(d, t0))
		p.report(d, 0, Failing, t0)
	}
	require.Equal(t, 1, p.pick(d, t0))
	d2 := poolDest(destination.URLFailover, "http://a.test/", "http://c.test/")
	require.Equal(t, 0, p.pick(d2, t0))
	one := poolDest(destination.URLFailover, "http://a.test/")
	for range 2 * urlFailuresToCool {
		p.report(one, 0, Failing, t0)
		require.Equal(t, 0, p.pick(one, t0))
	}
}

func TestPoolValidation(t *testing.T) {
	t.Parallel()
	many := make([]string, destination.MaxPoolURLs+1)
	for i := range many {
		many[i] = "http://h" + string(rune('a'+i)) + ".test/"
	}
	for _, c := range []struct {
		name string
		d    destination.Destination
		want string
	}{
		{"one URL in urls", destination.Destination{URL: "http://a.test/", URLs: []string{"http://a.test/"}}, "two URLs or more"},
		{"first is not url", destination.Destination{URL: "http://a.test/", URLs: []string{"http://b.test/", "http://a.test/"}}, "first URL of the pool"},
		{"bad second", destination.Destination{URL: "http://a.test/", URLs: []string{"http://a.test/", "ftp://b.test/"}}, `URL 2 of the pool: URL "ftp://b.test/": scheme must be http or https`},
		{"credentials", destination.Destination{URL: "http://a.test/", URLs: []string{"http://a.test/", "http://u:p@b.test/"}}, "URL 2 of the pool: URL must not contain credentials"},
		{"repeated", destination.Destination{URL: "http://a.test/", URLs: []string{"http://a.test/", "http://b.test/", "http://a.test/"}}, "URL 3 of the pool repeats URL 1"},
		{"too many", destination.Destination{URL: many[0], URLs: many}, "at most 10 URLs; 11 given"},
		{"strategy", destination.Destination{URL: "http://a.test/", URLStrategy: "random"}, `url-strategy "random": use "failover" or "round-robin"`},
	} {
		c.d.Name = "d"
		err := c.d.WithDefaults().Validate()
		require.ErrorContains(t, err, c.want, c.name)
	}
	d := poolDest(destination.URLRoundRobin, "http://a.test/", "http://b.test/?token=s3cret")
	require.NoError(t, d.Validate())
	require.Equal(t, []string{"http://a.test/", "http://b.test/?token=xxxxx"}, d.Redacted().URLs, "every URL of the pool is redacted")
	require.Equal(t, []string{"http://a.test/"}, poolDest("", "http://a.test/").Pool())
	require.Nil(t, poolDest("", "http://a.test/").URLs, "a single URL is not a pool")
}

// An attempt's log line names the index of its URL in the pool (never the
// URL); a destination with one URL logs none.
func TestAttemptLogLineNamesTheURLIndex(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	r := &Relay{log: slog.New(slog.NewTextHandler(&buf, nil)), cfg: Config{Now: time.Now}}
	r.logOutcome(Outcome{Dest: "d", EventID: "e1", Attempt: 2, Result: Result{Status: 503, URL: 1, Pooled: true}, Decision: Decision{Action: Retry}})
	require.Contains(t, buf.String(), " url=1 ")
	buf.Reset()
	r.logOutcome(Outcome{Dest: "d2", EventID: "e2", Attempt: 1, Result: Result{Status: 503}, Decision: Decision{Action: Retry}})
	require.Contains(t, buf.String(), "event_id=e2")
	require.NotContains(t, buf.String(), "url=")
}
