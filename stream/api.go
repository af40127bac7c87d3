package stream

import (
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// APIPrefix is the subject prefix of js's API requests.
func APIPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return jetstream.DefaultAPIPrefix
}
