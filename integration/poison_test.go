package integration

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/publish"
	"github.com/relaydev/relay/relay"
)

// poisonMemoryLimit is the address space a relay under the poison test may
// take: about twenty times what it takes delivering 1 MiB events, far below
// what one poisonous evaluation built before its bounds (1.6-10 GB).
const poisonMemoryLimit = 2 << 30

// limitMemory caps the address space of the relay process p (RLIMIT_AS),
// as prlimit --as does: past it, the Go runtime dies of "out of memory".
func limitMemory(t *testing.T, p *proc, limit uint64) {
	t.Helper()
	rl := unix.Rlimit{Cur: limit, Max: limit}
	require.NoError(t, unix.Prlimit(p.cmd.Process.Pid, unix.RLIMIT_AS, &rl, nil))
}

// The red team's poison: a filter and a body template that built gigabytes
// from one 1 MiB event, and a filter of nested loops that held a core for
// minutes. Under a memory limit, relay dead-letters each poisoned event
// with its reason, delivers the other destinations' events, and stays up.
func TestFaultPoisonousFilterAndTemplate(t *testing.T) {
	t.Parallel()
	e := setup(t)
	healthy := newSink(t, func(_ hit, w http.ResponseWriter) int { return faultOK(w) })
	never := newSink(t, func(_ hit, w http.ResponseWriter) int { return faultOK(w) })
	e.addDest(destination.Destination{Name: "healthy", URL: healthy.URL})
	// Each of these is within its bounds on a small event: they are saved,
	// and meet the large event only when it comes.
	e.addDest(destination.Destination{Name: "repeat", URL: never.URL, Filter: `len(repeat(body, 2000)) > 0`})
	e.addDest(destination.Destination{Name: "nested", URL: never.URL, Filter: `all(data, {all(data, {true})})`})
	e.addDest(destination.Destination{Name: "print", URL: never.URL, BodyTemplate: `{{print` + strings.Repeat(" .Body", 400) + `}}`})

	p := faultRun(t, e.url, "--ack-wait", "10s", "--shutdown-grace", "5s")
	limitMemory(t, p, poisonMemoryLimit)

	big := `"` + strings.Repeat("x", 1<<20-4096) + `"`
	list := "[" + strings.Repeat("1,", (1<<20-4096)/2) + "1]"
	poisoned := map[string]publish.Published{
		"repeat": e.publish("repeat", "", big),
		"nested": e.publish("nested", "", list),
		"print":  e.publish("print", "", big),
	}
	published := map[string]string{}
	for i := range 20 {
		body := `{"n":` + strings.Repeat("1", i+1) + `}`
		published[e.publish("healthy", "", body).ID] = body
	}

	eventually(t, 60*time.Second, func() bool { return len(healthy.delivered()) == len(published) }, "the healthy destination's events are delivered:\n%s", p.output())
	for dest, res := range poisoned {
		eventually(t, 60*time.Second, func() bool { return len(e.deadLetters(dest)) == 1 }, "%s's poisoned event is dead-lettered:\n%s", dest, p.output())
		l := e.deadLetters(dest)[0]
		require.Equal(t, res.ID, l.EventID)
		want := relay.ReasonFilterError
		if dest == "print" {
			want = relay.ReasonTemplateError
		}
		require.Equal(t, want, l.Reason, dest)
		require.NotEmpty(t, l.Note, "%s: the dead letter says which bound", dest)
	}
	require.True(t, faultRunning(p), "relay died:\n%s", p.output())
	require.Zero(t, never.received(), "no poisoned event was sent")
	require.Zero(t, faultLedger(t, e, healthy, "healthy", published, 1))

}
