package destination

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// RetryPolicy decides how long to wait before the next attempt and when to
// give up. The wait after attempt n (1-based) is
//
//	base * 2^(n-1), capped at Max, then scaled by a random factor in
//	[1-Jitter, 1+Jitter].
//
// Proportional jitter spreads the retries of events that failed together (a
// destination outage) over a window that grows with the wait, so a recovering
// destination is not hit by them all at once; an additive second of jitter, as
// some queues use, does nothing at waits of minutes. With Jitter <= 0.5 the
// expected waits still double, so the schedule stays recognisable.
type RetryPolicy struct {
	// Base is the wait after the first failed attempt. Optional, default 2s.
	Base Duration `json:"base,omitempty"`
	// Max caps the wait before jitter. Optional, default 1h.
	Max Duration `json:"max,omitempty"`
	// Jitter is the fraction (0 to 0.5) by which a wait is randomly
	// lengthened or shortened. Optional, default 0.2; set NoJitter for none.
	Jitter float64 `json:"jitter,omitempty"`
	// NoJitter turns jitter off (for tests and strict schedules).
	NoJitter bool `json:"no_jitter,omitempty"`
	// MaxAttempts is the number of attempts before an event is dead-lettered,
	// the first included. Optional, default 15: with the other defaults about
	// 4 hours of retries.
	MaxAttempts int `json:"max_attempts,omitempty"`
}

// Retry policy defaults.
const (
	DefaultBase        = 2 * time.Second
	DefaultMaxBackoff  = time.Hour
	DefaultJitter      = 0.2
	DefaultMaxAttempts = 15
	maxAllowedAttempts = 1000
)

// WithDefaults returns p with zero fields set to their defaults.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.Base == 0 {
		p.Base = Duration(DefaultBase)
	}
	if p.Max == 0 {
		p.Max = Duration(DefaultMaxBackoff)
	}
	if p.Jitter == 0 && !p.NoJitter {
		p.Jitter = DefaultJitter
	}
	if p.NoJitter {
		p.Jitter = 0
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	return p
}

// Validate reports a policy that cannot work, as a *SettingError naming
// the setting at fault.
func (p RetryPolicy) Validate() error {
	switch {
	case p.Base < Duration(10*time.Millisecond):
		return settingErr("backoff-base", fmt.Errorf("retry base %s must be at least 10ms", time.Duration(p.Base)))
	case p.Max < p.Base:
		return settingErr("backoff-max", fmt.Errorf("maximum backoff %s must not be below the base %s", time.Duration(p.Max), time.Duration(p.Base)))
	case p.Max > Duration(7*24*time.Hour):
		return settingErr("backoff-max", fmt.Errorf("maximum backoff %s exceeds 7 days", time.Duration(p.Max)))
	case p.Jitter < 0 || p.Jitter > 0.5:
		return settingErr("jitter", fmt.Errorf("jitter %.2f must be between 0 and 0.5", p.Jitter))
	case p.MaxAttempts < 1 || p.MaxAttempts > maxAllowedAttempts:
		return settingErr("max-attempts", fmt.Errorf("max attempts %d must be between 1 and %d", p.MaxAttempts, maxAllowedAttempts))
	}
	return nil
}

// Backoff is the wait after failed attempt n (1-based) before jitter: pure and
// exact. It never overflows: the doubling stops once it reaches Max.
func (p RetryPolicy) Backoff(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d, limit := time.Duration(p.Base), time.Duration(p.Max)
	for i := 1; i < attempt; i++ {
		if d >= limit/2 {
			return limit
		}
		d *= 2
	}
	return min(d, limit)
}

// Jittered scales d by 1 + Jitter*(2u-1), u being a uniform random number in
// [0,1) drawn from rnd (nil: the global source).
func (p RetryPolicy) Jittered(d time.Duration, rnd *rand.Rand) time.Duration {
	if p.NoJitter || p.Jitter <= 0 || d <= 0 {
		return d
	}
	u := rand.Float64()
	if rnd != nil {
		u = rnd.Float64()
	}
	return time.Duration(float64(d) * (1 + p.Jitter*(2*u-1)))
}

// Delay is the jittered wait after failed attempt n.
func (p RetryPolicy) Delay(attempt int, rnd *rand.Rand) time.Duration {
	return p.Jittered(p.Backoff(attempt), rnd)
}
