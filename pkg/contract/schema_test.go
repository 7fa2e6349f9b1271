package contract

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The published JSON Schemas and the Go validation must agree: a scorer in another language that
// validates against the schema must not be refused by the writer, and the reverse.
func compileSchemas(t *testing.T) map[string]*jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	for _, name := range []string{"metric-changed", "score-updated", "write-result", "failure"} {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(Schema(map[string]string{
			"metric-changed": TypeMetricChanged, "score-updated": TypeScoreUpdated, "write-result": TypeWriteDone, "failure": TypeScoreFailed,
		}[name])))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := c.AddResource("https://scoreflow.io/schemas/"+name+".schema.json", doc); err != nil {
			t.Fatal(err)
		}
	}
	out := map[string]*jsonschema.Schema{}
	for typ, file := range schemaFiles {
		s, err := c.Compile("https://scoreflow.io/" + file)
		if err != nil {
			t.Fatalf("compile %s: %v", file, err)
		}
		out[typ] = s
	}
	return out
}

func TestSchemasAgreeWithValidate(t *testing.T) {
	schemas := compileSchemas(t)
	scoreDocs := []string{
		`{"resource":"r","items":[{"cluster":"c1","scores":[{"name":"a","value":1}]}]}`,
		`{"resource":"r.example","validUntil":"2030-01-01T00:00:00Z","items":[{"cluster":"c1","scores":[{"name":"app1;gpu0","value":-100}]}]}`,
		`{"resource":"R","items":[{"cluster":"c1","scores":[{"name":"a","value":1}]}]}`,
		`{"resource":"r","items":[]}`,
		`{"resource":"r","items":[{"cluster":"default","scores":[{"name":"a","value":1}]}]}`,
		`{"resource":"r","items":[{"cluster":"open-cluster-management-agent","scores":[{"name":"a","value":1}]}]}`,
		`{"resource":"r","items":[{"cluster":"scoreflow","scores":[{"name":"a","value":1}]}]}`,
		`{"resource":"r","items":[{"cluster":"monitoring","scores":[{"name":"a","value":1}]}]}`,
		`{"resource":"r","items":[{"cluster":"knative-eventing","scores":[{"name":"a","value":1}]}]}`,
		`{"resource":"r","items":[{"cluster":"kube-flannel","scores":[{"name":"a","value":1}]}]}`,
		`{"resource":"r","items":[{"cluster":"kubelet","scores":[{"name":"a","value":1}]}]}`,
		`{"resource":"r","items":[{"cluster":"c1","scores":[{"name":"a","value":101}]}]}`,
		`{"resource":"r","items":[{"cluster":"c1","scores":[{"name":"a","value":1.5}]}]}`,
		`{"resource":"r","items":[{"cluster":"c1","scores":[{"name":"${a}","value":1}]}]}`,
		`{"resource":"r","items":[{"cluster":"c1","scores":[]}]}`,
		`{"resource":"r","items":[{"cluster":"c1","scores":[{"name":"a","value":1}]}],"extra":1}`,
		`{"resource":"r","neverExpires":true,"items":[{"cluster":"c1","scores":[{"name":"a","value":1}]}]}`,
		`{"resource":"r","neverExpires":true,"validUntil":"2030-01-01T00:00:00Z","items":[{"cluster":"c1","scores":[{"name":"a","value":1}]}]}`,
		`{"resource":"r","neverExpires":false,"validUntil":"2030-01-01T00:00:00Z","items":[{"cluster":"c1","scores":[{"name":"a","value":1}]}]}`,
	}
	metricDocs := []string{
		`{"samples":[{"metric":"up","cluster":"c1","value":1,"observedAt":"2026-01-01T00:00:00Z"}]}`,
		`{"samples":[{"metric":"up","cluster":"c1","labels":{"gpu":"a100"},"value":-1.5,"observedAt":"2026-01-01T00:00:00Z"}]}`,
		`{"samples":[{"metric":"1up","cluster":"c1","value":1,"observedAt":"2026-01-01T00:00:00Z"}]}`,
		`{"samples":[{"metric":"up","cluster":"c1","labels":{"a-b":"x"},"value":1,"observedAt":"2026-01-01T00:00:00Z"}]}`,
		`{"samples":[{"metric":"up","cluster":"c1","value":1}]}`,
		`{"samples":[]}`,
	}
	check := func(typ, doc string, v validator) {
		t.Helper()
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(doc)))
		if err != nil {
			t.Fatal(err)
		}
		schemaErr := schemas[typ].Validate(inst)
		goErr := DecodeJSON([]byte(doc), v)
		if goErr == nil {
			goErr = v.Validate()
		}
		if (schemaErr == nil) != (goErr == nil) {
			t.Errorf("%s\n  schema: %v\n  Go:     %v", doc, schemaErr, goErr)
		}
	}
	for _, d := range scoreDocs {
		check(TypeScoreUpdated, d, &ScoreUpdated{})
	}
	for _, d := range metricDocs {
		check(TypeMetricChanged, d, &MetricChanged{})
	}
}

func TestWriteResultMatchesSchema(t *testing.T) {
	schemas := compileSchemas(t)
	r := WriteResult{Input: EventRef{Source: "s", ID: "1", Type: TypeScoreUpdated}, Resource: "r", Items: []ItemResult{
		{Cluster: "c1", Outcome: OutcomeWritten, ResourceVersion: "12"},
		{Cluster: "c2", Outcome: OutcomeFailed, Reason: ReasonUnavailable, Message: "x", Retriable: true},
	}}
	b, _ := json.Marshal(r)
	inst, _ := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err := schemas[TypeWriteFailed].Validate(inst); err != nil {
		t.Errorf("%s: %v", b, err)
	}
	// A refusal that counts its items instead of listing them.
	for i := 0; i < 100; i++ {
		r.Items = append(r.Items, ItemResult{Cluster: "c", Outcome: OutcomeFailed, Reason: ReasonClusterNotAccepted, Message: "not accepted by the hub"})
	}
	small, changed := FitRefusal(NewWriteResult("w", r))
	inst, _ = jsonschema.UnmarshalJSON(bytes.NewReader(small.Data()))
	if err := schemas[TypeWriteFailed].Validate(inst); !changed || err != nil {
		t.Errorf("compact refusal (changed %v) %s: %v", changed, small.Data(), err)
	}
}
