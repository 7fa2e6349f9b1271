package health

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"
	"k8s.io/client-go/rest"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"

	"github.com/scoreflow/scoreflow/harness/benchcpu"
	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/scorer"
)

func serve(t *testing.T, s *Scorer) string {
	t.Helper()
	s.Log = slog.New(slog.NewJSONHandler(&bytes.Buffer{}, nil))
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	fn := function.New("health-scorer", "test")
	return functest.Serve(t, fn, scorer.Handler(fn.Source(), s.Routes()))
}

const healthy = `{"apiVersion":"cluster.open-cluster-management.io/v1","kind":"ManagedCluster","metadata":{"name":"c1","resourceVersion":"7"},
"spec":{"hubAcceptsClient":true,"leaseDurationSeconds":60},"status":{"conditions":[
{"type":"HubAcceptedManagedCluster","status":"True","reason":"x","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"},
{"type":"ManagedClusterJoined","status":"True","reason":"x","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"},
{"type":"ManagedClusterConditionAvailable","status":"True","reason":"x","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"}],
"version":{"kubernetes":"v1.35.0"}}}`

func rawEvent(t *testing.T, typ, data string, at time.Time) event.Event {
	t.Helper()
	e := cloudevents.NewEvent()
	e.SetID("1")
	e.SetSource("https://10.96.0.1:443")
	e.SetType(typ)
	if !at.IsZero() {
		e.SetTime(at)
	}
	if err := e.SetData(cloudevents.ApplicationJSON, []byte(data)); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestValidForFlag(t *testing.T) {
	url := serve(t, &Scorer{Resource: "dr-health", ScoreName: "up", ValidFor: time.Hour})
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	status, reply := functest.Send(t, url, rawEvent(t, TypeAdd, healthy, at))
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	su, err := contract.DecodeScoreUpdated(reply)
	if err != nil {
		t.Fatal(err)
	}
	if su.Resource != "dr-health" || su.Items[0].Scores[0].Name != "up" || su.Items[0].Scores[0].Value != 100 ||
		su.ValidUntil == nil || !su.ValidUntil.Equal(at.Add(time.Hour)) || !reply.Time().Equal(at) {
		t.Errorf("reply %+v at %s, want dr-health/up 100 valid until %s", su, reply.Time(), at.Add(time.Hour))
	}
}

func TestEventWithoutTimeIsScoredAsOfReceipt(t *testing.T) {
	url := serve(t, &Scorer{Resource: "cluster-health", ScoreName: "health"})
	before := time.Now()
	status, reply := functest.Send(t, url, rawEvent(t, TypeUpdate, healthy, time.Time{}))
	if status != http.StatusOK || reply.Time().Before(before.Truncate(time.Second)) || time.Since(reply.Time()) > 5*time.Second {
		t.Errorf("status %d, reply time %s, want about now", status, reply.Time())
	}
}

func TestRefusals(t *testing.T) {
	url := serve(t, &Scorer{Resource: "cluster-health", ScoreName: "health"})
	tests := []struct {
		name, typ, data string
		reason          contract.Reason
		want            string
	}{
		{"reference mode", TypeRefUpdate, `{"kind":"ManagedCluster","name":"c1","apiVersion":"cluster.open-cluster-management.io/v1"}`, contract.ReasonBadConfig, "mode to Resource"},
		{"not JSON", TypeAdd, `cluster c1`, contract.ReasonInvalidData, "not a ManagedCluster"},
		{"another kind", TypeAdd, `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"c1"}}`, contract.ReasonInvalidData, "Namespace"},
		{"another group", TypeAdd, `{"apiVersion":"example.com/v1","kind":"ManagedCluster","metadata":{"name":"c1"}}`, contract.ReasonInvalidData, "example.com"},
		{"name that is no cluster namespace", TypeDelete, strings.Replace(healthy, `"name":"c1"`, `"name":"kube-system"`, 1), contract.ReasonUnknownCluster, "kube-system"},
		{"another event type", contract.TypePing, healthy, contract.ReasonWrongType, "dev.knative.sources.ping"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, reply := functest.Send(t, url, rawEvent(t, tt.typ, tt.data, time.Now()))
			if status != http.StatusBadRequest || reply == nil {
				t.Fatalf("status %d reply %v, want 400 with score.failed", status, reply)
			}
			f, err := contract.DecodeFailure(reply)
			if err != nil || f.Reason != tt.reason || f.Retriable || !strings.Contains(f.Message, tt.want) {
				t.Errorf("failure %+v %v, want %s mentioning %q", f, err, tt.reason, tt.want)
			}
		})
	}
}

func TestScorerValidate(t *testing.T) {
	for _, s := range []Scorer{
		{Resource: "Cluster_Health", ScoreName: "health"},
		{Resource: "cluster-health", ScoreName: "a b"},
		{Resource: "cluster-health", ScoreName: "health", ValidFor: -time.Second},
	} {
		if err := s.Validate(); err == nil {
			t.Errorf("%+v accepted", s)
		}
	}
}

// A deleted cluster, or one being deleted, has nothing to score: 202 and no event, so the writer
// is not asked to write for a cluster it would refuse.
func TestDeletedClustersAreNotScored(t *testing.T) {
	url := serve(t, &Scorer{Resource: "cluster-health", ScoreName: "health"})
	deleting := strings.Replace(healthy, `"resourceVersion":"7"`, `"resourceVersion":"7","deletionTimestamp":"2026-03-01T11:59:00Z"`, 1)
	for _, tt := range []struct{ name, typ, data string }{
		{"delete event", TypeDelete, healthy},
		{"update of a cluster being deleted", TypeUpdate, deleting},
	} {
		status, reply := functest.Send(t, url, rawEvent(t, tt.typ, tt.data, time.Now()))
		if status != http.StatusAccepted || reply != nil {
			t.Errorf("%s: status %d reply %v, want 202 and no event", tt.name, status, reply)
		}
	}
}

// A ping while the hub cannot be reached (the informer has never listed it) is retried (503); a ping whose data is not the
// health-scorer's (empty) configuration is refused (400 BadConfig).
func TestPingFailures(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	clusters := WatchClusters(ctx, clusterclient.NewForConfigOrDie(&rest.Config{Host: gone, Timeout: 2 * time.Second}), slog.New(slog.DiscardHandler))
	url := serve(t, &Scorer{Resource: "cluster-health", ScoreName: "health", Clusters: clusters})

	status, reply := functest.Send(t, url, functest.Ping(`{}`))
	if _, f := functest.Reply(t, reply); status != http.StatusServiceUnavailable || f == nil || f.Reason != contract.ReasonUnavailable || !f.Retriable {
		t.Errorf("hub down: status %d failure %+v, want 503 retriable Unavailable", status, f)
	}
	status, reply = functest.Send(t, url, functest.Ping(`{"resource":"other"}`))
	if _, f := functest.Reply(t, reply); status != http.StatusBadRequest || f == nil || f.Reason != contract.ReasonBadConfig || !strings.Contains(f.Message, "resource") {
		t.Errorf("unknown field: status %d failure %+v, want 400 BadConfig naming it", status, f)
	}
}

// clusterList is a Lister that answers with a fixed list.
type clusterList []ManagedCluster

func (l clusterList) List(context.Context) ([]ManagedCluster, error) { return l, nil }

// BenchmarkPing1000 and BenchmarkPing10000 score 1,000 and 10,000 ManagedClusters from one list
// of the hub: the work a ping does once the list has arrived.
func BenchmarkPing1000(b *testing.B)  { benchPing(b, 1000) }
func BenchmarkPing10000(b *testing.B) { benchPing(b, 10000) }

func benchPing(b *testing.B, n int) {
	list := make(clusterList, n)
	for i := range list {
		conds := map[string]string{CondHubAccepted: "True", CondJoined: "True", CondAvailable: "True"}
		if i%10 == 0 {
			conds[CondAvailable] = "Unknown"
		}
		list[i] = *cluster(60, time.Duration(i%600)*time.Second, conds)
		list[i].Metadata.Name = fmt.Sprintf("cluster-%05d", i)
	}
	s := &Scorer{Resource: "cluster-health", ScoreName: "health", ValidFor: DefaultValidFor, Clusters: list,
		Log: slog.New(slog.NewJSONHandler(io.Discard, nil)), Now: func() time.Time { return now }}
	e := cloudevents.NewEvent()
	e.SetID("1")
	e.SetSource("s")
	e.SetType(contract.TypePing)
	b.ReportAllocs()
	cpu := benchcpu.Start()
	for b.Loop() {
		res, err := s.Ping(context.Background(), e)
		if err != nil || len(res.Scores.Items) != n {
			b.Fatal(err, res)
		}
	}
	cpu.Report(b)
}
