package writer

import (
	"net/http"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/harness/authtest"
	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
)

// With authentication on, a score.updated posted straight at the writer moves a score only with a
// token the hub issued to the writer Trigger's identity for the writer's audience. Without a
// token, with another audience, signed by a key the hub never had, expired, or from another
// identity, it is refused with 401 or 403, a write.failed naming the reason, and nothing written.
func TestWriterWritesOnlyForTheTriggersIdentity(t *testing.T) {
	const audience = "scoreflow/score-writer"
	trigger := authtest.Subject("scoreflow", "score-writer-oidc-eventing.knative.dev-trigger")
	opts := authtest.PodFiles(t, hub, audience, trigger)
	a, err := function.NewAuthenticator(opts)
	if err != nil {
		t.Fatal(err)
	}
	late := opts
	late.Now = func() time.Time { return time.Now().Add(authtest.MinTokenTTL + time.Minute) }
	expiredAuth, err := function.NewAuthenticator(late)
	if err != nil {
		t.Fatal(err)
	}
	srv := startWriter(t, serverOpts{auth: a})
	expiredSrv := startWriter(t, serverOpts{auth: expiredAuth})

	good := authtest.Token(t, hub.Kube, "scoreflow", "score-writer-oidc-eventing.knative.dev-trigger", audience)
	refused := []struct {
		name, url, authorization string
		status                   int
		reason                   contract.Reason
	}{
		{"no token", srv.url, "", 401, function.ReasonUnauthenticated},
		{"other audience", srv.url, "Bearer " + authtest.Token(t, hub.Kube, "scoreflow", "score-writer-oidc-eventing.knative.dev-trigger", "scoreflow/static-scorer"), 401, function.ReasonUnauthenticated},
		{"signed by another key", srv.url, "Bearer " + authtest.Forge(t, good, true), 401, function.ReasonUnauthenticated},
		{"expired", expiredSrv.url, "Bearer " + good, 401, function.ReasonUnauthenticated},
		{"other subject", srv.url, "Bearer " + authtest.Token(t, hub.Kube, "scoreflow", "cloudevents-player", audience), 403, function.ReasonNotAllowed},
	}
	for i, c := range refused {
		resource := "auth-refused"
		req := functest.Request(t, c.url, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: resource, Items: []contract.ClusterScores{item("c1", score("s", float64(i+1)))}}))
		if c.authorization != "" {
			req.Header.Set("Authorization", c.authorization)
		}
		status, reply := do(t, req)
		if status != c.status {
			t.Errorf("%s: %d, want %d", c.name, status, c.status)
			continue
		}
		if r := result(t, reply); r.Reason != c.reason {
			t.Errorf("%s: reason %s, want %s", c.name, r.Reason, c.reason)
		}
		if got := get(t, "c1", resource); got != nil {
			t.Fatalf("%s: a refused event wrote %+v", c.name, got.Status.Scores)
		}
	}

	req := functest.Request(t, srv.url, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "auth-admitted", Items: []contract.ClusterScores{item("c1", score("s", 7))}}))
	req.Header.Set("Authorization", "Bearer "+good)
	if status, reply := do(t, req); status != http.StatusOK {
		t.Fatalf("the Trigger's token: %d %v", status, reply)
	}
	got := get(t, "c1", "auth-admitted")
	if got == nil || len(got.Status.Scores) != 1 || got.Status.Scores[0].Value != 7 {
		t.Fatalf("the admitted event was not written: %+v", got)
	}
}
