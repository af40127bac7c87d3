package relay

import (
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/relaydev/relay/egress"
	"github.com/relaydev/relay/opevent"
)

// proxyFailingAfter is how long the egress proxy fails every attempt
// before relay tells the operator with an operator event; proxyFailingEvery
// is how often it tells again while that lasts.
const (
	proxyFailingAfter = time.Minute
	proxyFailingEvery = 10 * time.Minute
)

// proxyWatch follows the egress proxy's failures: a run of them is the
// failures since the proxy last granted a tunnel.
type proxyWatch struct {
	mu       sync.Mutex
	since    time.Time // the run's first failure
	last     time.Time // its last
	failures int
	logged   time.Time // the last warning
	held     int       // failures not logged since
	told     time.Time // the last operator event of the run
	events   int       // the run's operator events
}

// proxyFailed counts a failure of the egress proxy (err wraps an
// *egress.ProxyError): in relay_egress_proxy_failures_total, in a warning
// a minute, and in relay.egress.proxy_failing when it lasts.
func (r *Relay) proxyFailed(err error) {
	r.cfg.Metrics.proxyFailure()
	pe, ok := errors.AsType[*egress.ProxyError](err)
	if !ok {
		return
	}
	now := r.cfg.Now()
	w := &r.proxyDown
	w.mu.Lock()
	if w.failures == 0 || pe.LastTunnel.After(w.last) {
		// The proxy worked since the last failure: a new run.
		w.since, w.failures, w.told, w.events = now, 0, time.Time{}, 0
	}
	w.last = now
	w.failures++
	logIt := now.Sub(w.logged) >= time.Minute
	held := w.held
	if logIt {
		w.logged, w.held = now, 0
	} else {
		w.held++
	}
	tell := now.Sub(w.since) >= proxyFailingAfter && (w.events == 0 || now.Sub(w.told) >= proxyFailingEvery)
	var ev opevent.Event
	if tell {
		w.told = now
		w.events++
		ev = opevent.Event{Type: opevent.ProxyFailing, ID: opevent.ID(opevent.ProxyFailing, pe.Proxy, opevent.Millis(w.since), strconv.Itoa(w.events)),
			Data: opevent.ProxyFailingBody{At: now.UTC(), Proxy: pe.Proxy, Since: w.since.UTC(), Failures: w.failures, LastError: pe.Error()}}
	}
	since, failures := w.since, w.failures
	w.mu.Unlock()
	if logIt {
		r.log.Warn("egress proxy failing: deliveries wait for it, no attempt used (relay_egress_proxy_failures_total counts every failure)",
			"err", pe, "failing_since", since.UTC(), "failures", failures, "not_logged", held)
	}
	if tell {
		r.emitOp(ev)
	}
}
