package writer

import (
	"github.com/cloudevents/sdk-go/v2/event"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Every malformed request is answered with a 4xx, a write.failed reply naming the reason when the
// server could tell one, and no change on the hub.
func TestMalformedInputChangesNothing(t *testing.T) {
	s := startWriter(t, serverOpts{})
	// A reference object that a broken request might be aimed at.
	if _, reply := s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "target", Items: []contract.ClusterScores{item("c1", score("a", 1))}})); result(t, reply).Failed() {
		t.Fatal("setup write failed")
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	good := `{"resource":"target","items":[{"cluster":"c1","scores":[{"name":"a","value":99}]}]}`
	binary := func(typ, ctype, body string, drop ...string) request {
		h := map[string]string{
			"Ce-Specversion": "1.0", "Ce-Id": "m-" + typ + ctype + body[:min(len(body), 20)], "Ce-Source": "test/malformed",
			"Ce-Type": typ, "Ce-Time": now, "Content-Type": ctype,
		}
		for _, d := range drop {
			delete(h, d)
		}
		return request{method: http.MethodPost, headers: h, body: body}
	}
	tests := []struct {
		name   string
		req    request
		status int
		reason contract.Reason // "" when no reply event is expected
	}{
		{"GET", request{method: http.MethodGet}, http.StatusMethodNotAllowed, ""},
		{"empty POST", request{method: http.MethodPost}, http.StatusBadRequest, contract.ReasonNotCloudEvent},
		{"plain text, no CloudEvent headers", request{method: http.MethodPost, headers: map[string]string{"Content-Type": "text/plain"}, body: "hello"}, http.StatusBadRequest, contract.ReasonNotCloudEvent},
		{"JSON but not a CloudEvent", request{method: http.MethodPost, headers: map[string]string{"Content-Type": "application/json"}, body: good}, http.StatusBadRequest, contract.ReasonNotCloudEvent},
		{"no ce-id", binary(contract.TypeScoreUpdated, "application/json", good, "Ce-Id"), http.StatusBadRequest, contract.ReasonNotCloudEvent},
		{"no ce-source", binary(contract.TypeScoreUpdated, "application/json", good, "Ce-Source"), http.StatusBadRequest, contract.ReasonNotCloudEvent},
		{"unknown specversion", func() request {
			r := binary(contract.TypeScoreUpdated, "application/json", good)
			r.headers["Ce-Specversion"] = "9.9"
			return r
		}(), http.StatusBadRequest, contract.ReasonNotCloudEvent},
		{"wrong type", binary(contract.TypeMetricChanged, "application/json", good), http.StatusBadRequest, contract.ReasonWrongType},
		{"time an hour ahead", func() request {
			r := binary(contract.TypeScoreUpdated, "application/json", good)
			r.headers["Ce-Time"] = time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
			return r
		}(), http.StatusBadRequest, contract.ReasonInvalidData},
		{"XML data", binary(contract.TypeScoreUpdated, "application/xml", "<scores/>"), http.StatusBadRequest, contract.ReasonInvalidData},
		{"data not JSON", binary(contract.TypeScoreUpdated, "application/json", "{resource: target"), http.StatusBadRequest, contract.ReasonInvalidData},
		{"JSON array", binary(contract.TypeScoreUpdated, "application/json", `[`+good+`]`), http.StatusBadRequest, contract.ReasonInvalidData},
		{"trailing garbage", binary(contract.TypeScoreUpdated, "application/json", good+`xx`), http.StatusBadRequest, contract.ReasonInvalidData},
		{"misspelt field", binary(contract.TypeScoreUpdated, "application/json", `{"resource":"target","itmes":[]}`), http.StatusBadRequest, contract.ReasonInvalidData},
		{"no resource", binary(contract.TypeScoreUpdated, "application/json", `{"items":[{"cluster":"c1","scores":[{"name":"a","value":99}]}]}`), http.StatusBadRequest, contract.ReasonInvalidData},
		{"resource not a DNS name", binary(contract.TypeScoreUpdated, "application/json", `{"resource":"../target","items":[{"cluster":"c1","scores":[{"name":"a","value":99}]}]}`), http.StatusBadRequest, contract.ReasonInvalidData},
		{"no items", binary(contract.TypeScoreUpdated, "application/json", `{"resource":"target","items":[]}`), http.StatusBadRequest, contract.ReasonInvalidData},
		{"items null", binary(contract.TypeScoreUpdated, "application/json", `{"resource":"target","items":null}`), http.StatusBadRequest, contract.ReasonInvalidData},
		{"cluster twice", binary(contract.TypeScoreUpdated, "application/json", `{"resource":"target","items":[{"cluster":"c1","scores":[{"name":"a","value":99}]},{"cluster":"c1","scores":[{"name":"a","value":98}]}]}`), http.StatusBadRequest, contract.ReasonInvalidData},
		{"value as string", binary(contract.TypeScoreUpdated, "application/json", `{"resource":"target","items":[{"cluster":"c1","scores":[{"name":"a","value":"99"}]}]}`), http.StatusBadRequest, contract.ReasonInvalidData},
		{"value beyond float64", binary(contract.TypeScoreUpdated, "application/json", `{"resource":"target","items":[{"cluster":"c1","scores":[{"name":"a","value":1e999}]}]}`), http.StatusBadRequest, contract.ReasonInvalidData},
		{"validUntil not a time", binary(contract.TypeScoreUpdated, "application/json", `{"resource":"target","validUntil":"tomorrow","items":[{"cluster":"c1","scores":[{"name":"a","value":99}]}]}`), http.StatusBadRequest, contract.ReasonInvalidData},
		{"structured mode, broken envelope", request{method: http.MethodPost, headers: map[string]string{"Content-Type": "application/cloudevents+json"}, body: `{"specversion":"1.0","id":`}, http.StatusBadRequest, contract.ReasonNotCloudEvent},
		{"every item refused", binary(contract.TypeScoreUpdated, "application/json", `{"resource":"target","items":[{"cluster":"c1","scores":[{"name":"a","value":101}]},{"cluster":"kube-system","scores":[{"name":"a","value":1}]}]}`), http.StatusUnprocessableEntity, contract.ReasonOutOfRange},
		{"body over 8 MiB", binary(contract.TypeScoreUpdated, "application/json", `{"resource":"target","items":[`+strings.Repeat(" ", 9<<20)+`]}`), http.StatusRequestEntityTooLarge, contract.ReasonNotCloudEvent},
	}
	before := snapshot(t)
	writes := s.apiRequests(t, "create", "update_status")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, reply := tt.req.do(t, s.url)
			if status != tt.status {
				t.Errorf("status %d, want %d", status, tt.status)
			}
			if tt.reason == "" {
				return
			}
			if reply == nil || reply.Type() != contract.TypeWriteFailed {
				t.Fatalf("reply %v, want write.failed", reply)
			}
			r := result(t, reply)
			got := r.Reason
			if got == "" && len(r.Items) > 0 {
				got = r.Items[0].Reason
			}
			if got != tt.reason || r.Message == "" && len(r.Items) == 0 {
				t.Errorf("reason %q (%+v), want %s with a message", got, r, tt.reason)
			}
		})
	}
	if after := snapshot(t); !reflect.DeepEqual(before, after) {
		t.Errorf("malformed input changed the hub:\nbefore %v\nafter  %v", before, after)
	}
	if w := s.apiRequests(t, "create", "update_status"); w != writes {
		t.Errorf("malformed input issued %v writes", w-writes)
	}
	if got := scoresOf(get(t, "c1", "target")); got["a"] != 1 {
		t.Errorf("target score a = %d, want 1 (unchanged)", got["a"])
	}
}

type request struct {
	method  string
	headers map[string]string
	body    string
}

func (r request) do(t *testing.T, url string) (int, *event.Event) {
	t.Helper()
	req, err := http.NewRequest(r.method, url, strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range r.headers {
		req.Header.Set(k, v)
	}
	return do(t, req)
}
