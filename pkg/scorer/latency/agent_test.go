package latency

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
)

// sink is a K_SINK receiver: it decodes each CloudEvent posted to it and answers 202, as a
// broker's ingress does.
func sink(t *testing.T) (string, <-chan event.Event) {
	t.Helper()
	got := make(chan event.Event, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e, err := binding.ToEvent(r.Context(), cehttp.NewMessageFromHttpRequest(r))
		if err != nil {
			t.Errorf("sink received a non-CloudEvent: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		got <- *e
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, got
}

func TestAgentSendsToSinkWithOverrides(t *testing.T) {
	target := newServer(t, 20*time.Millisecond, http.StatusOK, false)
	sinkURL, got := sink(t)
	cfgFile := filepath.Join(t.TempDir(), "latency.yaml")
	// YAML, as a ConfigMap would hold it; entries score the agent's own cluster.
	yml := "resource: latency\nlatencies:\n- name: redhat-com-avgLatency\n  url: " + target.URL + "\n  runs: 2\n  waitBetweenRuns: 100ms\n"
	if err := os.WriteFile(cfgFile, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	sender, err := function.NewSender(sinkURL, `{"extensions":{"managedcluster":"east-1","team":"sre"}}`)
	if err != nil {
		t.Fatal(err)
	}
	logs := &bytes.Buffer{}
	a := &Agent{
		Scorer:     New("east-1", slog.New(slog.NewJSONHandler(logs, nil)), prometheus.NewRegistry()),
		ConfigFile: cfgFile, Interval: time.Hour, Sender: sender, Source: "scoreflow/latency-scorer/east-1",
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	var e event.Event
	select {
	case e = <-got:
	case <-time.After(10 * time.Second):
		t.Fatalf("nothing sent to K_SINK within 10s (interval is 1h: the first round must run at start); logs:\n%s", logs)
	}
	if e.Type() != contract.TypeScoreUpdated || e.Source() != "scoreflow/latency-scorer/east-1" {
		t.Errorf("sent %s from %s", e.Type(), e.Source())
	}
	for k, want := range map[string]string{"managedcluster": "east-1", "team": "sre"} {
		if v, ok := e.Extensions()[k]; !ok || v != want {
			t.Errorf("extension %s = %v, want %q (from K_CE_OVERRIDES)", k, v, want)
		}
	}
	su, err := contract.DecodeScoreUpdated(&e)
	if err != nil {
		t.Fatal(err)
	}
	// 20 ms of 0..1000 ms: 100 - 0.2*20 = 96; noise only lowers it (80 ms more would be 80).
	if su.Resource != "latency" || len(su.Items) != 1 || su.Items[0].Cluster != "east-1" || len(su.Items[0].Scores) != 1 ||
		su.Items[0].Scores[0].Name != "redhat-com-avgLatency" || su.Items[0].Scores[0].Value > 96 || su.Items[0].Scores[0].Value < 80 {
		t.Errorf("sent %+v, want east-1 redhat-com-avgLatency between 80 and 96", su)
	}
	if time.Since(e.Time()) > 10*time.Second {
		t.Errorf("event time %s is not the measurement's", e.Time())
	}
}

func TestAgentRoundErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	sinkURL, got := sink(t)
	sender, err := function.NewSender(sinkURL, "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, file, want string }{
		{"missing file", filepath.Join(dir, "nope.yaml"), "no such file"},
		{"malformed YAML", write("bad.yaml", "resource: [\n"), "bad.yaml"},
		{"another cluster", write("other.yaml", "resource: r\nlatencies:\n- {name: a, url: 'http://x', cluster: west}\n"), "runs on cluster"},
		{"nothing measurable", write("down.yaml", "resource: r\nlatencies:\n- {name: a, url: '"+closed.URL+"', runs: 1}\n"), "no target could be measured"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &Agent{Scorer: New("east-1", slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)), prometheus.NewRegistry()),
				ConfigFile: tt.file, Interval: time.Hour, Sender: sender, Source: "s"}
			err := a.Round(context.Background())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Round = %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
	select {
	case e := <-got:
		t.Errorf("a failed round sent %s", e.Type())
	default:
	}
}
