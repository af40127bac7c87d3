package client

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/api"

	// Every kind of destination, as the relay binary has them.
	_ "github.com/relaydev/relay/kind/kinds"
)

// operations are the OpenAPI operations the tests called through a
// Client (checkingTransport records them).
var operations = struct {
	sync.Mutex
	hit map[string]bool
}{hit: map[string]bool{}}

func exercised(operationID string) {
	operations.Lock()
	defer operations.Unlock()
	operations.hit[operationID] = true
}

// TestMain decodes every answer strictly (a field the server answers and
// the client's type lacks fails), runs the tests, then, when the whole
// package ran (no -run or -skip), fails if an operation of the OpenAPI
// document was never called by a test: every operation has a client
// method, tested against the real server.
func TestMain(m *testing.M) {
	strictDecoding = true
	code := m.Run()
	if code == 0 && flag.Lookup("test.run").Value.String() == "" && flag.Lookup("test.skip").Value.String() == "" {
		operations.Lock()
		missing := untested(operations.hit)
		operations.Unlock()
		if len(missing) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: TestEveryOperationHasAClientTest: no test calls these operations of api/openapi.json through the client: %v\n", missing)
			code = 1
		}
	}
	os.Exit(code)
}

// untested are the document's operations not in hit, sorted.
func untested(hit map[string]bool) []string {
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
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
// called is reported, one called is not.
func TestEveryOperationHasAClientTest(t *testing.T) {
	t.Parallel()
	all := untested(nil)
	require.Subset(t, all, []string{"getOpenAPI", "publishEvent", "publishEventBatch", "createDestination", "replayDeadLetters", "listAttempts"}, "every operation of the document")
	hit := map[string]bool{}
	for _, op := range all[1:] {
		hit[op] = true
	}
	require.Equal(t, all[:1], untested(hit))
}
