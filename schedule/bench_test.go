package schedule_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/relaydev/relay/schedule"
	"github.com/relaydev/relay/schedule/redistest"
	"github.com/relaydev/relay/stream"
	"github.com/relaydev/relay/stream/embedded"
)

func benchSetup(b *testing.B) (*schedule.Store, *redis.Client, *nats.Conn, jetstream.JetStream) {
	b.Helper()
	r := redistest.Start(b, redistest.Options{})
	rdb := r.Client()
	s, err := embedded.Start(embedded.Config{DataDir: b.TempDir(), Port: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	if err := stream.Ensure(context.Background(), js, stream.Config{}); err != nil {
		b.Fatal(err)
	}
	return schedule.NewStore(rdb), rdb, nc, js
}

// fill parks n entries of dest due at due(i), pipelined.
func fill(b *testing.B, st *schedule.Store, rdb *redis.Client, dest string, from, n int, due func(i int) time.Time) {
	b.Helper()
	ctx := context.Background()
	body := []byte(`{"type":"order.created","order":1234567,"customer":"c-42","total":"99.90"}`)
	const chunk = 5000
	for lo := from; lo < from+n; lo += chunk {
		var wg sync.WaitGroup
		errs := make(chan error, chunk)
		sem := make(chan struct{}, 64)
		for i := lo; i < min(lo+chunk, from+n); i++ {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				e := schedule.Entry{Dest: dest, Subject: stream.InSubject(dest, ""), EventID: "evt-" + strconv.Itoa(i), Attempts: 3, Body: body, Due: due(i), Origin: uint64(i + 1)}
				if err := st.Park(ctx, e); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPark measures parking with an empty schedule and with 1,000,000
// entries already parked (the sorted set makes both O(log n)).
func BenchmarkPark(b *testing.B) {
	for _, pre := range []int{0, 1_000_000} {
		b.Run(fmt.Sprintf("parked=%d", pre), func(b *testing.B) {
			st, rdb, _, _ := benchSetup(b)
			far := time.Now().Add(24 * time.Hour)
			fill(b, st, rdb, "d", 0, pre, func(int) time.Time { return far })
			ctx := context.Background()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					e := schedule.Entry{Dest: "d", Subject: "relay.in.d", EventID: fmt.Sprintf("new-%p-%d", pb, i), Body: []byte("{}"), Due: far, Origin: uint64(i)}
					if err := st.Park(ctx, e); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkPromote measures how many due entries per second one promoter
// republishes (claim, publish with PubAck, remove), with 1,000,000 entries
// parked that are not yet due.
func BenchmarkPromote(b *testing.B) {
	for _, pre := range []int{0, 1_000_000} {
		b.Run(fmt.Sprintf("parked=%d", pre), func(b *testing.B) {
			st, rdb, _, js := benchSetup(b)
			far := time.Now().Add(24 * time.Hour)
			fill(b, st, rdb, "d", 0, pre, func(int) time.Time { return far })
			past := time.Now().Add(-time.Second)
			fill(b, st, rdb, "d", pre, b.N, func(int) time.Time { return past })
			p := schedule.Promoter{Store: st, JS: js}
			ctx := context.Background()
			b.ResetTimer()
			start := time.Now()
			done := 0
			for done < b.N {
				k, err := p.PromoteDue(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if k == 0 {
					b.Fatalf("promoted %d of %d, then nothing", done, b.N)
				}
				done += k
			}
			b.ReportMetric(float64(done)/time.Since(start).Seconds(), "members/s")
		})
	}
}

// BenchmarkPromoteLateness parks 100,000 entries due over the next 10
// seconds, runs a promoter as relay does, and reports how late each one
// reached NATS after its due time (p50, p99, max). Run with -benchtime=1x.
func BenchmarkPromoteLateness(b *testing.B) {
	const n = 100_000
	const spread = 10 * time.Second
	for range b.N {
		st, rdb, nc, js := benchSetup(b)
		start := time.Now().Add(3 * time.Second) // time to fill first
		due := func(i int) time.Time { return start.Add(time.Duration(i) * spread / n) }
		fill(b, st, rdb, "d", 0, n, due)
		if time.Now().After(start) {
			b.Fatalf("filling took longer than the head start")
		}
		var mu sync.Mutex
		late := make([]time.Duration, 0, n)
		got := make(chan struct{})
		sub, err := nc.Subscribe("relay.in.d", func(m *nats.Msg) {
			id := m.Header.Get(stream.HdrEventID)
			i, _ := strconv.Atoi(id[len("evt-"):])
			mu.Lock()
			late = append(late, time.Since(due(i)))
			if len(late) == n {
				close(got)
			}
			mu.Unlock()
		})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _ = schedule.Promoter{Store: st, JS: js}.Run(ctx) }()
		select {
		case <-got:
		case <-time.After(spread + time.Minute):
			b.Fatalf("only %d of %d promoted", len(late), n)
		}
		cancel()
		_ = sub.Unsubscribe()
		slices.Sort(late)
		b.ReportMetric(float64(late[n/2].Milliseconds()), "p50-ms")
		b.ReportMetric(float64(late[n*99/100].Milliseconds()), "p99-ms")
		b.ReportMetric(float64(late[n-1].Milliseconds()), "max-ms")
	}
}
