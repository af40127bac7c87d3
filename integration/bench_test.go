package integration

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/relaydev/relay/destination"
	"github.com/relaydev/relay/publish"
)

// BenchmarkReplicas measures deliveries per second of 1 and 2 relay
// processes sharing one unordered destination that takes 5ms per request
// (concurrency 16 per replica). Run with:
//
//	go test ./integration -run '^$' -bench Replicas -benchtime 20000x
func BenchmarkReplicas(b *testing.B) {
	for _, n := range []int{1, 2} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			e := setup(b)
			s := newSink(b, func(h hit, w http.ResponseWriter) int {
				time.Sleep(5 * time.Millisecond) // the destination's own latency
				w.WriteHeader(http.StatusNoContent)
				return http.StatusNoContent
			})
			e.addDest(destination.Destination{Name: "bench", URL: s.URL, Concurrency: 16})
			for range b.N {
				if _, err := e.prod.Publish(b.Context(), publish.Event{Dest: "bench", Data: []byte(`{"x":1}`)}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			start := time.Now()
			for range n {
				startProc(b, "--nats-url", e.url, "--log-level", "warn", "run")
			}
			for len(s.delivered()) < b.N {
				time.Sleep(10 * time.Millisecond)
				if time.Since(start) > 10*time.Minute {
					b.Fatalf("only %d of %d delivered", len(s.delivered()), b.N)
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "deliveries/s")
		})
	}
}
