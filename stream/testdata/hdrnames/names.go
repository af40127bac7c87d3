// Package names is what TestOnlyThisPackageNamesRelaysHeaders must find:
// relay's headers named outside package stream, under an import of another
// name, and a name of stream's that is no header.
package names

import (
	"github.com/nats-io/nats.go"
	st "github.com/relaydev/relay/stream"
)

func set(h nats.Header) {
	h.Set(st.HdrMsgID, "x")
	_ = h.Get(st.HdrReason)
	_ = st.DLQSubject("orders")
}
