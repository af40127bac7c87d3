package relay

import (
	"context"
	"fmt"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/relaydev/relay/schedule"
	"github.com/relaydev/relay/stream"
)

// Ready reports whether a relay can do its work: NATS connected, relay's
// streams present, and Redis answering when sched is set.
func Ready(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, sched *schedule.Store) error {
	if st := nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("NATS is %s", st)
	}
	for _, name := range []string{stream.EventsStream, stream.DLQStream} {
		if _, err := js.Stream(ctx, name); err != nil {
			return fmt.Errorf("stream %s: %w", name, err)
		}
	}
	if sched != nil {
		if err := sched.Client().Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
	}
	return nil
}

// OpsHandler serves /metrics from gatherer, /healthz (the process answers),
// /readyz (ready returns nil within 2s) and, with profiles, /debug/pprof/.
func OpsHandler(gatherer prometheus.Gatherer, ready func(context.Context) error, profiles bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	if profiles {
		// For finding where the time goes. They tell anyone who reaches
		// them the goroutines' stacks and the memory's shape: keep them
		// off a shared network.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}
