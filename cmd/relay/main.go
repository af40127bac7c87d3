// Command relay delivers events published to NATS JetStream to HTTP
// destinations and to queues and buses (NATS, Kafka, RabbitMQ, Pub/Sub,
// SQS, EventBridge), with retries, dead letters and replay. Run
// "relay --help".
package main

import (
	"os"

	// Every kind of destination besides HTTP.
	_ "github.com/relaydev/relay/kind/kinds"
)

func main() {
	os.Exit(Main(os.Args, os.Stdin, os.Stdout, os.Stderr))
}
