package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/relaydev/relay/stream"
)

func main() {
	dir := os.Args[2]
	t0 := time.Now()
	s, err := stream.StartEmbedded(stream.EmbeddedConfig{DataDir: dir, Port: -1, Logf: func(f string, a ...any) { fmt.Printf("%6.2fs "+f+"\n", append([]any{time.Since(t0).Seconds()}, a...)...) }})
	if err != nil {
		fmt.Println("start:", err, time.Since(t0))
		os.Exit(1)
	}
	fmt.Println("started in", time.Since(t0))
	if os.Args[1] != "fill" {
		s.Shutdown()
		return
	}
	n, _ := strconv.Atoi(os.Args[3])
	nc, _ := nats.Connect(s.ClientURL())
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if err := stream.Ensure(ctx, js, stream.Config{}); err != nil {
		panic(err)
	}
	body := make([]byte, 1024)
	for i := range body {
		body[i] = 'x'
	}
	for i := 0; i < n; i++ {
		if _, err := js.PublishAsync(stream.InSubject(fmt.Sprintf("d%d", i%100), ""), body); err != nil {
			panic(err)
		}
		if i%10000 == 0 {
			<-js.PublishAsyncComplete()
		}
	}
	<-js.PublishAsyncComplete()
	fmt.Println("filled", n, time.Since(t0))
	os.Exit(0) // no shutdown: as after a crash
}
