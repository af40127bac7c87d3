package api

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
)

// tenantedPrefixes are the paths of a tenant's resources: served at the
// path for the request's key's tenant, and under /v1/tenants/{tenant}
// (TenantPath) for the tenant named (routes of tenancy tenanted).
var tenantedPrefixes = []string{"/v1/events", "/v1/stats", "/v1/attempts", "/v1/destinations", "/v1/dead-letters"}

// tenantedPath reports whether path is a tenant's resource's.
func tenantedPath(path string) bool {
	return slices.ContainsFunc(tenantedPrefixes, func(p string) bool {
		return path == p || strings.HasPrefix(path, p+"/") || strings.HasPrefix(path, p+":")
	})
}

// withTenantPaths is the OpenAPI document doc with a copy of each of its
// tenanted paths under /v1/tenants/{tenant}: the same operations, for the
// tenant named, their ids ending in ForTenant, answering 404 for a tenant
// that does not exist or, to a tenant key, is not its own.
func withTenantPaths(doc []byte) []byte {
	var d map[string]any
	if err := json.Unmarshal(doc, &d); err != nil {
		panic("api/openapi.json: " + err.Error())
	}
	paths := d["paths"].(map[string]any)
	for _, p := range slices.Sorted(maps.Keys(paths)) {
		if !tenantedPath(p) {
			continue
		}
		var item map[string]any
		b, _ := json.Marshal(paths[p])
		_ = json.Unmarshal(b, &item)
		params, _ := item["parameters"].([]any)
		item["parameters"] = append([]any{map[string]any{
			"name": "tenant", "in": "path", "required": true, "schema": map[string]any{"type": "string"},
			"description": "The tenant the request is for. One that does not exist, or (to a tenant key) another tenant than the key's, answers 404.",
		}}, params...)
		for m, op := range item {
			op, ok := op.(map[string]any)
			if !ok || m == "parameters" {
				continue
			}
			op["operationId"] = op["operationId"].(string) + "ForTenant"
			op["summary"] = "For the tenant in the path: " + op["summary"].(string)
			rs := op["responses"].(map[string]any)
			if _, ok := rs["404"]; !ok {
				rs["404"] = map[string]any{"$ref": "#/components/responses/Problem"}
			}
		}
		paths[TenantPath("{tenant}", strings.TrimPrefix(p, "/v1"))] = item
	}
	out, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		panic("api/openapi.json: " + err.Error())
	}
	return out
}
