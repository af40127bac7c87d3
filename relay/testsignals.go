package relay

import "github.com/relaydev/relay/internal/testsignal"

// testSignals are steps of relay's background work that tests wait for
// instead of polling for their effect. Outside tests they do nothing.
type testSignals struct {
	// running: Run has loaded the destinations and started its loops.
	running testsignal.Signal[struct{}]
	// destApplied: a change of the destinations bucket made while Run runs
	// has been applied (and logged); the value is the destination's name.
	destApplied testsignal.Signal[string]
	// settledHeadAcked: ackSettledHead acked the head an ordered partition
	// waited for; the value is its stream sequence.
	settledHeadAcked testsignal.Signal[uint64]
}

// Init makes every signal record; call it before the work starts.
func (s *testSignals) Init(tb testsignal.TB) {
	s.running.Init(tb)
	s.destApplied.Init(tb)
	s.settledHeadAcked.Init(tb)
}
