// Package testsignal lets a test wait for a step of background work instead
// of polling for its effect. The work calls Signal at the step; a test that
// called Init first waits for it with WaitOrTimeout; a test that watches
// values too many to queue (progress written every second) calls Notify
// instead. A Signal that was not initialised (always, outside tests) does
// nothing.
package testsignal

import "time"

// WaitTimeout is how long WaitOrTimeout waits: long, so that a slow, loaded
// machine still passes; a signal that never comes fails the test then.
const WaitTimeout = time.Minute

// size is how many values may be signalled and not yet waited for.
const size = 100

// TB is the part of testing.TB a signal uses (the testing package itself
// stays out of production binaries).
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Signal carries values from background work to a test. Its zero value is
// ready for Signal, which does nothing until Init.
type Signal[T any] struct {
	ch chan T
	tb TB
	fn func(T)
}

// Init makes s record the values signalled. Call it from the test before
// the work that signals starts.
func (s *Signal[T]) Init(tb TB) {
	s.ch = make(chan T, size)
	s.tb = tb
}

// Notify makes s pass every value signalled to f, on the goroutine that
// signals it, instead of keeping it for WaitOrTimeout. f must not block.
// Call it from the test before the work that signals starts.
func (s *Signal[T]) Notify(f func(T)) {
	s.fn = f
}

// Signal records v for WaitOrTimeout, or passes it to Notify's function;
// it never blocks. Without Init or Notify it does nothing.
func (s *Signal[T]) Signal(v T) {
	if s.fn != nil {
		s.fn(v)
		return
	}
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
		s.tb.Errorf("testsignal: %d values signalled and not waited for", size)
	}
}

// WaitOrTimeout returns the next value signalled, waiting up to WaitTimeout;
// the test fails when none comes. Call it from the test's goroutine.
func (s *Signal[T]) WaitOrTimeout() T {
	if s.ch == nil {
		panic("testsignal: WaitOrTimeout on a signal without Init")
	}
	s.tb.Helper()
	t := time.NewTimer(WaitTimeout)
	defer t.Stop()
	select {
	case v := <-s.ch:
		return v
	case <-t.C:
		s.tb.Fatalf("testsignal: no signal within %s", WaitTimeout)
	}
	var zero T
	return zero
}

// RequireEmpty fails the test if a value was signalled and not waited for.
func (s *Signal[T]) RequireEmpty() {
	if s.ch == nil {
		panic("testsignal: RequireEmpty on a signal without Init")
	}
	s.tb.Helper()
	select {
	case v := <-s.ch:
		s.tb.Errorf("testsignal: want no signal, got %v", v)
	default:
	}
}
