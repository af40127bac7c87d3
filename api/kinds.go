package api

import (
	"net/http"

	"github.com/relaydev/relay/kind"
)

// destTypeView is a destination kind as GET /v1/destination-types shows
// it: what its configuration's fields are, which are credentials, and
// whether it keeps the order of a key's events.
type destTypeView struct {
	Name        string       `json:"name"`
	Title       string       `json:"title"`
	Description string       `json:"description"`
	Fields      []kind.Field `json:"fields"`
	// Ordered: some configuration of the kind keeps the order of a key's
	// events (a destination may then be ordered); each field's help says
	// which, where it depends on one.
	Ordered bool `json:"ordered"`
}

// httpType is the HTTP kind's entry: its settings are a destination's own
// (url, headers...), not a config.
var httpType = destTypeView{
	Name: kind.HTTP, Title: "HTTP (webhooks)", Fields: []kind.Field{},
	Description: "A POST per event to a URL (or a pool of URLs), signed with Standard Webhooks; a 2xx is a delivery. Its settings are the destination's own: url, headers, body template.",
	Ordered:     true,
}

// destinationTypes answers GET /v1/destination-types: every kind this
// relay delivers to, HTTP first.
func (s *Server) destinationTypes(c *call) {
	out := []destTypeView{httpType}
	for _, k := range kind.All() {
		f := k.Fields()
		if f == nil {
			f = []kind.Field{}
		}
		out = append(out, destTypeView{Name: k.Name(), Title: k.Title(), Description: k.Description(), Fields: f, Ordered: orderable(k)})
	}
	c.json(http.StatusOK, map[string]any{"types": out})
}

// orderable reports whether some configuration of k keeps order: its
// defaults, or with one of its bool or enum fields set otherwise.
func orderable(k kind.Kind) bool {
	if k.Ordered(kind.Config{}) {
		return true
	}
	for _, f := range k.Fields() {
		vals := f.Values
		if f.Type == kind.Bool {
			vals = []string{"true", "false"}
		}
		for _, v := range vals {
			if k.Ordered(kind.Config{f.Name: v}) {
				return true
			}
		}
	}
	return false
}
