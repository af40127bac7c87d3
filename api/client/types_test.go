package client

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/relaydev/relay/api"
)

// jsonFields are the JSON names of t's fields, those of embedded structs
// included.
func jsonFields(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || !f.IsExported():
		case f.Anonymous && name == "":
			out = append(out, jsonFields(f.Type)...)
		case name == "":
			out = append(out, f.Name)
		default:
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Each type mirrors its schema of the document: the same fields. (Strict
// decoding checks the types against what the server answers; this checks
// them against what the document says, fields the tests never see
// included.)
func TestTypesMirrorTheDocument(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	require.NoError(t, err)
	types := map[string]reflect.Type{
		"Problem":           reflect.TypeFor[Error](),
		"NewEvent":          reflect.TypeFor[NewEvent](),
		"Published":         reflect.TypeFor[Published](),
		"DestStats":         reflect.TypeFor[DestStats](),
		"ItemError":         reflect.TypeFor[ItemError](),
		"BatchResult":       reflect.TypeFor[BatchResult](),
		"BatchPublished":    reflect.TypeFor[BatchPublished](),
		"DestinationChange": reflect.TypeFor[DestinationSettings](),
		"NewDestination":    reflect.TypeFor[NewDestination](),
		"Destination":       reflect.TypeFor[Destination](),
		"DestinationType":   reflect.TypeFor[DestinationType](),
		"Attempt":           reflect.TypeFor[Attempt](),
		"DeadLetter":        reflect.TypeFor[DeadLetter](),
		"DeadLetterDetail":  reflect.TypeFor[DeadLetterDetail](),
		"DeadLetterPage":    reflect.TypeFor[DeadLetterPage](),
		"LetterSelection":   reflect.TypeFor[LetterSelection](),
		"ReplaySelection":   reflect.TypeFor[ReplaySelection](),
		"LetterOutcome":     reflect.TypeFor[LetterOutcome](),
		"ReplayResult":      reflect.TypeFor[ReplayResult](),
		"PurgeResult":       reflect.TypeFor[PurgeResult](),
		"AttemptRecord":     reflect.TypeFor[AttemptRecord](),
		"AttemptPage":       reflect.TypeFor[AttemptPage](),
		"EventView":         reflect.TypeFor[EventView](),
		"Retrying":          reflect.TypeFor[Retrying](),
		"Tenant":            reflect.TypeFor[Tenant](),
		"EventType":         reflect.TypeFor[EventType](),
		"EventTypeChange":   reflect.TypeFor[EventTypeChange](),
		// The answer of EventTypes, unwrapped.
		"EventTypeList":  nil,
		"TenantChange":   reflect.TypeFor[TenantChange](),
		"TenantPage":     reflect.TypeFor[TenantPage](),
		"KeyRecord":      reflect.TypeFor[KeyRecord](),
		"PortalSession":  reflect.TypeFor[PortalSession](),
		"TenantDefaults": reflect.TypeFor[TenantDefaults](),
		"TenantLimits":   reflect.TypeFor[TenantLimits](),
		"TenantPortal":   reflect.TypeFor[TenantPortal](),
		// The body of PublishBatch, built from its []NewEvent.
		"NewEventBatch": nil,
	}
	for name, ref := range doc.Components.Schemas {
		typ, ok := types[name]
		require.True(t, ok, "schema %s has no type in the client", name)
		if typ == nil {
			continue
		}
		var props []string
		for p := range ref.Value.Properties {
			props = append(props, p)
		}
		slices.Sort(props)
		require.Equal(t, props, jsonFields(typ), "schema %s and type %s", name, typ)
	}
	// Objects of the document that are not components.
	inline := func(s *openapi3.Schema, typ reflect.Type) {
		t.Helper()
		var props []string
		for p := range s.Properties {
			props = append(props, p)
		}
		slices.Sort(props)
		require.Equal(t, props, jsonFields(typ), "%s", typ)
	}
	inline(doc.Components.Schemas["EventView"].Value.Properties["destinations"].Value.Items.Value, reflect.TypeFor[DestState]())
	inline(doc.Components.Schemas["DestStats"].Value.Properties["dead_letter_failures"].Value, reflect.TypeFor[DeadLetterFailures]())
	body := func(path string) *openapi3.Schema {
		return doc.Paths.Find(path).Post.RequestBody.Value.Content["application/json"].Schema.Value
	}
	inline(body("/v1/destinations/{name}/pause"), reflect.TypeFor[pauseBody]())
	inline(body("/v1/destinations/{name}/rotate-secret"), reflect.TypeFor[rotateBody]())
}
