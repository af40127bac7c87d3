package destination

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRetryPolicyBackoffTable(t *testing.T) {
	t.Parallel()
	def := RetryPolicy{Base: Duration(2 * time.Second), Max: Duration(time.Hour), NoJitter: true}
	odd := RetryPolicy{Base: Duration(1500 * time.Millisecond), Max: Duration(time.Hour)}
	small := RetryPolicy{Base: Duration(3 * time.Second), Max: Duration(10 * time.Second)}
	week := RetryPolicy{Base: Duration(10 * time.Millisecond), Max: Duration(7 * 24 * time.Hour)}

	tests := []struct {
		name    string
		p       RetryPolicy
		attempt int
		want    time.Duration
	}{
		{"attempt -5 treated as 1", def, -5, 2 * time.Second},
		{"attempt 0 treated as 1", def, 0, 2 * time.Second},
		{"attempt 1", def, 1, 2 * time.Second},
		{"attempt 2", def, 2, 4 * time.Second},
		{"attempt 3", def, 3, 8 * time.Second},
		{"attempt 4", def, 4, 16 * time.Second},
		{"attempt 5", def, 5, 32 * time.Second},
		{"attempt 6", def, 6, 64 * time.Second},
		{"attempt 7", def, 7, 128 * time.Second},
		{"attempt 8", def, 8, 256 * time.Second},
		{"attempt 9", def, 9, 512 * time.Second},
		{"attempt 10", def, 10, 1024 * time.Second},
		{"attempt 11", def, 11, 2048 * time.Second},
		{"attempt 12 capped", def, 12, time.Hour},
		{"attempt 13 capped", def, 13, time.Hour},
		{"attempt 14 capped", def, 14, time.Hour},
		{"attempt 64 capped", def, 64, time.Hour},
		{"attempt 65 capped", def, 65, time.Hour},
		{"attempt 1000 capped", def, 1000, time.Hour},
		{"attempt MaxInt32 capped", def, math.MaxInt32, time.Hour},
		{"attempt MaxInt capped", def, math.MaxInt, time.Hour},
		{"non power of two base below cap", odd, 12, 3072 * time.Second},
		{"non power of two base capped", odd, 13, time.Hour},
		{"small cap attempt 1", small, 1, 3 * time.Second},
		{"small cap attempt 2", small, 2, 6 * time.Second},
		{"small cap attempt 3 capped not 12s", small, 3, 10 * time.Second},
		{"small cap attempt 4", small, 4, 10 * time.Second},
		{"7 day cap attempt 10", week, 10, 5120 * time.Millisecond},
		{"7 day cap MaxInt32 no overflow", week, math.MaxInt32, 7 * 24 * time.Hour},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tc.p.Backoff(tc.attempt))
		})
	}
}

func TestRetryPolicyBackoffMonotonicAndBounded(t *testing.T) {
	t.Parallel()
	p := RetryPolicy{}.WithDefaults()
	prev := time.Duration(0)
	for n := 1; n <= 2000; n++ {
		d := p.Backoff(n)
		require.Positive(t, d, "attempt %d", n)
		require.LessOrEqual(t, d, time.Duration(p.Max), "attempt %d", n)
		require.GreaterOrEqual(t, d, prev, "attempt %d: backoff must never shrink", n)
		prev = d
	}
}

func TestRetryPolicyJitteredBounds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		jitter float64
		d      time.Duration
	}{
		{"default jitter 2s", 0.2, 2 * time.Second},
		{"default jitter 1h", 0.2, time.Hour},
		{"small jitter", 0.05, 30 * time.Second},
		{"max jitter", 0.5, 10 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := RetryPolicy{Jitter: tc.jitter}
			rnd := rand.New(rand.NewPCG(1, 2))
			lo := time.Duration(float64(tc.d) * (1 - tc.jitter))
			hi := time.Duration(float64(tc.d) * (1 + tc.jitter))
			const draws = 10000
			seen := map[time.Duration]bool{}
			minV, maxV := time.Duration(math.MaxInt64), time.Duration(0)
			var sum float64
			for range draws {
				v := p.Jittered(tc.d, rnd)
				require.GreaterOrEqual(t, v, lo)
				require.LessOrEqual(t, v, hi)
				seen[v] = true
				minV, maxV = min(minV, v), max(maxV, v)
				sum += float64(v)
			}
			require.Greater(t, len(seen), draws/2, "jitter must actually vary the wait")
			spread := float64(hi - lo)
			// The draws should cover the whole window, not a sliver of it.
			require.Less(t, float64(minV-lo), spread*0.01)
			require.Less(t, float64(hi-maxV), spread*0.01)
			// Symmetric jitter: the mean stays at d.
			require.InDelta(t, float64(tc.d), sum/draws, float64(tc.d)*0.01)
		})
	}
}

func TestRetryPolicyJitteredUsesGivenSource(t *testing.T) {
	t.Parallel()
	p := RetryPolicy{}.WithDefaults()
	a := rand.New(rand.NewPCG(1, 2))
	b := rand.New(rand.NewPCG(1, 2))
	c := rand.New(rand.NewPCG(3, 4))
	differ := 0
	for n := 1; n <= 100; n++ {
		x, y, z := p.Delay(n%12+1, a), p.Delay(n%12+1, b), p.Delay(n%12+1, c)
		require.Equal(t, x, y, "the same seed must give the same delays")
		if x != z {
			differ++
		}
	}
	require.Greater(t, differ, 90, "another seed must give other delays")
}

func TestRetryPolicyNoJitter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		p    RetryPolicy
		d    time.Duration
	}{
		{"jitter 0", RetryPolicy{Jitter: 0}, 7 * time.Second},
		{"NoJitter after defaults", RetryPolicy{NoJitter: true}.WithDefaults(), 7 * time.Second},
		{"NoJitter overrides a jitter after defaults", RetryPolicy{NoJitter: true, Jitter: 0.3}.WithDefaults(), time.Hour},
		{"negative jitter", RetryPolicy{Jitter: -0.1}, 3 * time.Second},
		{"zero duration with jitter", RetryPolicy{Jitter: 0.2}, 0},
		{"negative duration with jitter", RetryPolicy{Jitter: 0.2}, -time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rnd := rand.New(rand.NewPCG(1, 2))
			for range 100 {
				require.Equal(t, tc.d, tc.p.Jittered(tc.d, rnd))
				require.Equal(t, tc.d, tc.p.Jittered(tc.d, nil))
			}
		})
	}

	p := RetryPolicy{NoJitter: true}.WithDefaults()
	rnd := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 20; n++ {
		require.Equal(t, p.Backoff(n), p.Delay(n, rnd), "attempt %d", n)
	}
}

func TestRetryPolicyWithDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   RetryPolicy
		want RetryPolicy
	}{
		{
			name: "zero",
			in:   RetryPolicy{},
			want: RetryPolicy{Base: Duration(2 * time.Second), Max: Duration(time.Hour), Jitter: 0.2, MaxAttempts: 15},
		},
		{
			name: "set fields kept",
			in:   RetryPolicy{Base: Duration(time.Second), Max: Duration(time.Minute), Jitter: 0.1, MaxAttempts: 3},
			want: RetryPolicy{Base: Duration(time.Second), Max: Duration(time.Minute), Jitter: 0.1, MaxAttempts: 3},
		},
		{
			name: "NoJitter",
			in:   RetryPolicy{NoJitter: true},
			want: RetryPolicy{Base: Duration(2 * time.Second), Max: Duration(time.Hour), NoJitter: true, MaxAttempts: 15},
		},
		{
			name: "NoJitter clears jitter",
			in:   RetryPolicy{NoJitter: true, Jitter: 0.4},
			want: RetryPolicy{Base: Duration(2 * time.Second), Max: Duration(time.Hour), NoJitter: true, MaxAttempts: 15},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := tc.in.WithDefaults()
			require.Equal(t, tc.want, got)
			require.NoError(t, got.Validate())
			require.Equal(t, got, got.WithDefaults(), "WithDefaults must be idempotent")
		})
	}
	require.Equal(t, 2*time.Second, DefaultBase)
	require.Equal(t, time.Hour, DefaultMaxBackoff)
	require.Equal(t, 0.2, DefaultJitter)
	require.Equal(t, 15, DefaultMaxAttempts)
}

func TestRetryPolicyValidate(t *testing.T) {
	t.Parallel()
	good := RetryPolicy{}.WithDefaults()
	with := func(f func(*RetryPolicy)) RetryPolicy {
		p := good
		f(&p)
		return p
	}
	tests := []struct {
		name    string
		p       RetryPolicy
		wantErr string // empty: valid
	}{
		{"defaults", good, ""},
		{"base 10ms", with(func(p *RetryPolicy) { p.Base = Duration(10 * time.Millisecond) }), ""},
		{"base 9ms", with(func(p *RetryPolicy) { p.Base = Duration(9 * time.Millisecond) }), "at least 10ms"},
		{"base 0", with(func(p *RetryPolicy) { p.Base = 0 }), "at least 10ms"},
		{"base negative", with(func(p *RetryPolicy) { p.Base = Duration(-time.Second) }), "at least 10ms"},
		{"max equal to base", with(func(p *RetryPolicy) { p.Max = p.Base }), ""},
		{"max below base", with(func(p *RetryPolicy) { p.Max = Duration(time.Second) }), "must not be below the base"},
		{"max 7 days", with(func(p *RetryPolicy) { p.Max = Duration(7 * 24 * time.Hour) }), ""},
		{"max over 7 days", with(func(p *RetryPolicy) { p.Max = Duration(7*24*time.Hour + time.Second) }), "exceeds 7 days"},
		{"jitter 0", with(func(p *RetryPolicy) { p.Jitter = 0 }), ""},
		{"jitter 0.5", with(func(p *RetryPolicy) { p.Jitter = 0.5 }), ""},
		{"jitter negative", with(func(p *RetryPolicy) { p.Jitter = -0.01 }), "jitter"},
		{"jitter over 0.5", with(func(p *RetryPolicy) { p.Jitter = 0.51 }), "jitter"},
		{"jitter 1", with(func(p *RetryPolicy) { p.Jitter = 1 }), "jitter"},
		{"attempts 1", with(func(p *RetryPolicy) { p.MaxAttempts = 1 }), ""},
		{"attempts 1000", with(func(p *RetryPolicy) { p.MaxAttempts = 1000 }), ""},
		{"attempts 0", with(func(p *RetryPolicy) { p.MaxAttempts = 0 }), "max attempts 0"},
		{"attempts negative", with(func(p *RetryPolicy) { p.MaxAttempts = -1 }), "max attempts -1"},
		{"attempts 1001", with(func(p *RetryPolicy) { p.MaxAttempts = 1001 }), "max attempts 1001"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.p.Validate()
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.wantErr)
		})
	}
}
