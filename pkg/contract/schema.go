package contract

import (
	"embed"
	"sort"
)

//go:embed schemas/*.schema.json
var schemaFS embed.FS

// schemaFiles maps each event type to its data's JSON Schema (draft 2020-12) under schemas/.
var schemaFiles = map[string]string{
	TypeMetricChanged: "schemas/metric-changed.schema.json",
	TypeScoreUpdated:  "schemas/score-updated.schema.json",
	TypeWriteDone:     "schemas/write-result.schema.json",
	TypeWriteFailed:   "schemas/write-result.schema.json",
	TypeScoreFailed:   "schemas/failure.schema.json",
}

// Schema returns the JSON Schema of an event type's data, or nil for a type scoreflow does not define.
func Schema(eventType string) []byte {
	name, ok := schemaFiles[eventType]
	if !ok {
		return nil
	}
	b, err := schemaFS.ReadFile(name)
	if err != nil {
		panic(err) // embedded at build time
	}
	return b
}

// EventTypes lists, sorted, the event types scoreflow defines, each with a JSON Schema: what it
// publishes in Knative's EventType registry (eventtypes/).
func EventTypes() []string {
	types := make([]string, 0, len(schemaFiles))
	for t := range schemaFiles {
		types = append(types, t)
	}
	sort.Strings(types)
	return types
}
