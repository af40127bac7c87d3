package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaydev/relay/stream"
)

// floorEvent is an event as the floor takes it: the fields the bench
// sends to relay's API.
type floorEvent struct {
	Dest string          `json:"dest"`
	ID   string          `json:"id"`
	Data json.RawMessage `json:"data"`
}

// floorResult is an event's answer, as relay's API gives it.
type floorResult struct {
	ID  string `json:"id"`
	Seq uint64 `json:"seq"`
}

// maxFloorBody bounds a request body, as relay's API does by default.
const maxFloorBody = 8 << 20

// apiFloor is the floor of (p) (issue 44): the least an HTTP handler can
// do to publish an event to JetStream, reading a JSON body and publishing
// asynchronously, answering 202 once JetStream acknowledged (a batch's
// events all in flight at once). relay's POST /v1/events and
// /v1/events:batch are measured against it.
type apiFloor struct {
	js jetstream.JetStream
}

func (f *apiFloor) publish(ctx context.Context, evs []floorEvent) ([]floorResult, error) {
	futures := make([]jetstream.PubAckFuture, len(evs))
	for i, ev := range evs {
		if ev.Dest == "" || ev.ID == "" {
			return nil, errors.New("dest and id are required")
		}
		m := nats.NewMsg(stream.InSubject(ev.Dest, ""))
		m.Header.Set(jetstream.MsgIDHeader, ev.ID)
		m.Data = ev.Data
		fut, err := f.js.PublishMsgAsync(m)
		if err != nil {
			return nil, err
		}
		futures[i] = fut
	}
	out := make([]floorResult, len(evs))
	for i, fut := range futures {
		select {
		case ack := <-fut.Ok():
			out[i] = floorResult{ID: evs[i].ID, Seq: ack.Sequence}
		case err := <-fut.Err():
			return nil, err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return out, nil
}

func (f *apiFloor) single(w http.ResponseWriter, r *http.Request) {
	var ev floorEvent
	if !readFloor(w, r, &ev) {
		return
	}
	res, err := f.publish(r.Context(), []floorEvent{ev})
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	answerFloor(w, res[0])
}

func (f *apiFloor) batch(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Events []floorEvent `json:"events"`
	}
	if !readFloor(w, r, &body) {
		return
	}
	res, err := f.publish(r.Context(), body.Events)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	answerFloor(w, struct {
		Stored  int           `json:"stored"`
		Failed  int           `json:"failed"`
		Results []floorResult `json:"results"`
	}{len(res), 0, res})
}

func readFloor(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxFloorBody))
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func answerFloor(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write(b)
}

// handler serves the floor's POST /v1/events and /v1/events:batch.
func (f *apiFloor) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/events", f.single)
	mux.HandleFunc("POST /v1/events:batch", f.batch)
	return mux
}

// runAPIFloor is the hidden "api-floor" subcommand: the floor on -addr,
// publishing to -nats-url, until SIGTERM.
func runAPIFloor(args []string) error {
	fs := flag.NewFlagSet("relay-bench api-floor", flag.ContinueOnError)
	natsURL := fs.String("nats-url", "", "NATS server")
	addr := fs.String("addr", "", "address to serve on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *natsURL == "" || *addr == "" {
		return errors.New("-nats-url and -addr are required")
	}
	nc, err := nats.Connect(*natsURL, nats.Name("relay-bench api-floor"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: (&apiFloor{js: js}).handler(), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Println("ready")
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
