package api

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	// Every kind of destination, as the relay binary has them.
	_ "github.com/relaydev/relay/kind/kinds"
)

// operations are the OpenAPI operations the tests sent a request to,
// through apiEnv.do.
var operations = struct {
	sync.Mutex
	hit map[string]bool
}{hit: map[string]bool{}}

func exercised(operationID string) {
	operations.Lock()
	defer operations.Unlock()
	operations.hit[operationID] = true
}

// TestMain runs the tests, then fails if a goroutine outlived them (every
// server and loop a test starts must stop with it), and, when the whole
// package ran (no -run or -skip), if an operation of the OpenAPI document
// was never exercised by a test: every operation the document promises is
// tested against it.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		// The Pub/Sub client's OpenCensus worker, started when its package
		// loads (kind/kinds imports it) and never stopped.
		if err := goleak.Find(goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start")); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: goleak: %v\n", err)
			code = 1
		}
	}
	if code == 0 && flag.Lookup("test.run").Value.String() == "" && flag.Lookup("test.skip").Value.String() == "" {
		operations.Lock()
		missing := untested(operations.hit)
		operations.Unlock()
		if len(missing) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: TestEveryOperationIsTested: no test sends a request (apiEnv.do) to these operations of api/openapi.json: %v\n", missing)
			code = 1
		}
	}
	os.Exit(code)
}

// untested are the document's operations not in hit, sorted.
func untested(hit map[string]bool) []string {
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPI)
	if err != nil {
		return []string{"(the document does not load: " + err.Error() + ")"}
	}
	var missing []string
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			if !hit[op.OperationID] {
				missing = append(missing, op.OperationID)
			}
		}
	}
	slices.Sort(missing)
	return missing
}

// The check TestMain makes once every test ran: an operation no test
// exercised is reported, one exercised is not.
func TestEveryOperationIsTested(t *testing.T) {
	t.Parallel()
	all := untested(nil)
	require.Subset(t, all, []string{"getOpenAPI", "publishEvent", "publishEventBatch", "createDestination", "replayDeadLetters"}, "every operation of the document")
	hit := map[string]bool{}
	for _, op := range all[1:] {
		hit[op] = true
	}
	require.Equal(t, all[:1], untested(hit))
}
