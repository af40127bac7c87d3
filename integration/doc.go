// Package integration holds relay's black-box tests: real embedded NATS
// servers, real HTTP sinks, and relay binaries run as processes and killed.
package integration
