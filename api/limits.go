package api

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/time/rate"
)

// tenantRate is a tenant's publish rate limiter in this server: its share
// of the tenant's PublishRate, with a burst of a second's worth.
type tenantRate struct {
	perSecond float64
	replicas  int
	lim       *rate.Limiter
}

// allowPublish takes the events of each tenant of counts (events per
// tenant) from its publish rate, or takes none, answers 429 with
// Retry-After (the seconds until they are allowed) and returns false. A
// tenant without a PublishRate, or no tenant, is not limited.
func (s *Server) allowPublish(c *call, counts map[string]int) bool {
	now := time.Now()
	var taken []*rate.Reservation
	refuse := func(retry time.Duration, detail string) bool {
		for _, res := range taken {
			res.CancelAt(now)
		}
		c.w.Header().Set("Retry-After", strconv.Itoa(max(int(math.Ceil(retry.Seconds())), 1)))
		c.problem(http.StatusTooManyRequests, "", detail)
		return false
	}
	for tenant, n := range counts {
		r := s.rateOf(tenant)
		if r == nil {
			continue
		}
		if n > r.lim.Burst() {
			return refuse(time.Second, fmt.Sprintf("a batch of %d events is more than tenant %s may publish at once (%g events per second over HTTP): send smaller batches; nothing was published", n, tenant, r.perSecond))
		}
		res := r.lim.ReserveN(now, n)
		if wait := res.DelayFrom(now); wait > 0 {
			res.CancelAt(now)
			return refuse(wait, fmt.Sprintf("tenant %s publishes at most %g events per second over HTTP: try again in %s; nothing was published", tenant, r.perSecond, wait.Round(time.Millisecond)))
		}
		taken = append(taken, res)
	}
	return true
}

// rateOf is tenant's publish rate limiter here, nil when it has none.
func (s *Server) rateOf(tenant string) *tenantRate {
	limit := s.cfg.Policies.Limits(tenant).PublishRate
	if limit <= 0 {
		return nil
	}
	replicas := 1
	if s.cfg.Replicas != nil {
		replicas = max(s.cfg.Replicas(), 1)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rates[tenant]
	if r == nil || r.perSecond != limit || r.replicas != replicas {
		share := limit / float64(replicas)
		r = &tenantRate{perSecond: limit, replicas: replicas, lim: rate.NewLimiter(rate.Limit(share), max(int(math.Ceil(share)), 1))}
		if len(s.rates) > 100_000 {
			clear(s.rates) // bounded; the limiters start full again
		}
		s.rates[tenant] = r
	}
	return r
}
