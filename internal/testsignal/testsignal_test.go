package testsignal

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// recorder is a TB that keeps what a signal reports.
type recorder struct{ errs []string }

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, a ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, a...))
}
func (r *recorder) Fatalf(format string, a ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, a...))
}

func TestSignalWithoutInitDoesNothing(t *testing.T) {
	t.Parallel()
	var s Signal[int]
	s.Signal(1) // neither blocks nor panics
	require.Panics(t, func() { s.WaitOrTimeout() })
}

func TestSignalDeliversValuesInOrder(t *testing.T) {
	t.Parallel()
	var s Signal[string]
	s.Init(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Signal("a")
		s.Signal("b")
	}()
	require.Equal(t, "a", s.WaitOrTimeout())
	require.Equal(t, "b", s.WaitOrTimeout())
	<-done
	s.RequireEmpty()
}

func TestSignalReportsWhatATestDidNotExpect(t *testing.T) {
	t.Parallel()
	var rec recorder
	var s Signal[int]
	s.Init(&rec)
	s.Signal(7)
	s.RequireEmpty()
	require.Equal(t, []string{"testsignal: want no signal, got 7"}, rec.errs)

	rec.errs = nil
	for i := range size + 1 {
		s.Signal(i)
	}
	require.Equal(t, []string{fmt.Sprintf("testsignal: %d values signalled and not waited for", size)}, rec.errs, "a full signal never blocks the work")
}

func TestSignalNotifyPassesEveryValue(t *testing.T) {
	t.Parallel()
	var s Signal[int]
	var got []int
	s.Notify(func(v int) { got = append(got, v) })
	for i := range size + 1 {
		s.Signal(i) // more than Init would queue: none is kept, none refused
	}
	require.Len(t, got, size+1)
	require.Equal(t, size, got[size])
}
