package relay

import (
	"github.com/relaydev/relay/internal/testsignal"
	"github.com/relaydev/relay/routing"
)

// TestSignals are steps of relay's background work that tests wait for
// instead of polling for their effect. Outside tests they do nothing. A
// test in the package initialises the Relay's own; one outside it passes
// them in Config.TestSignals.
type TestSignals struct {
	// Running: Run has loaded the destinations and started its loops.
	Running testsignal.Signal[struct{}]
	// DestApplied: a change of the destinations bucket made while Run runs
	// has been applied (and logged); the value is the destination's name.
	DestApplied testsignal.Signal[string]
	// SettledHeadAcked: ackSettledHead acked the head an ordered partition
	// waited for; the value is its stream sequence.
	SettledHeadAcked testsignal.Signal[uint64]
	// RouterWritten: the router, holding its lease, wrote its progress to
	// relay_state (the write went through); the value is what it wrote.
	// It fires every renewal (a second): Notify it rather than Init.
	RouterWritten testsignal.Signal[routing.State]
	// CheckWritten: the same for the unknown-destination check.
	CheckWritten testsignal.Signal[routing.CheckState]
	// OpEvent: an operator event of the delivery path or the operations
	// job was published (stored); the value is its type.
	OpEvent testsignal.Signal[string]
	// LogIndexed: an event's records in the delivery log are indexed, so
	// that a lookup by its id finds them; the value is its id (once per
	// index batch that names it).
	LogIndexed testsignal.Signal[string]
}

// Init makes every signal of a step record (not RouterWritten and
// CheckWritten, which fire every second); call it before the work starts.
func (s *TestSignals) Init(tb testsignal.TB) {
	s.Running.Init(tb)
	s.DestApplied.Init(tb)
	s.SettledHeadAcked.Init(tb)
	s.OpEvent.Init(tb)
}
