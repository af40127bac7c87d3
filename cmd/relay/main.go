// Command relay delivers events published to NATS JetStream to HTTP
// destinations, with retries, dead letters and replay. Run "relay --help".
package main

import "os"

func main() {
	os.Exit(Main(os.Args, os.Stdin, os.Stdout, os.Stderr))
}
