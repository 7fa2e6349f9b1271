package writer

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// The scoreflowresource attribute names the resource a score.updated is for; the broker's
// EventPolicies admit each sender for its own resources by it. An event whose data names another
// resource is refused (400, Forbidden, write.failed) and writes nothing; with
// --require-resource-attribute (the oidc variant), so is one without the attribute.
func TestResourceAttributeMustMatchTheData(t *testing.T) {
	t.Parallel()
	send := func(t *testing.T, s *server, attr *string, resource string) (int, *contract.WriteResult, string) {
		t.Helper()
		e := scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: resource, Items: []contract.ClusterScores{item("c1", score("a", 1))}})
		if attr != nil {
			e.SetExtension(contract.ExtResource, *attr)
		}
		status, reply := s.send(t, e)
		return status, result(t, reply), reply.Type()
	}
	ptr := func(s string) *string { return &s }
	for _, require := range []bool{false, true} {
		s := startWriter(t, serverOpts{requireResource: require})
		mine := fmt.Sprintf("attr-mine-%v", require)
		for name, attr := range map[string]*string{"another resource": ptr("attr-other"), "empty": ptr("")} {
			status, r, typ := send(t, s, attr, mine)
			if status != http.StatusBadRequest || typ != contract.TypeWriteFailed || r.Reason != contract.ReasonForbidden {
				t.Errorf("require=%v, attribute naming %s: %d %s %+v, want 400 write.failed Forbidden", require, name, status, typ, r)
			}
		}
		if get(t, "c1", mine) != nil {
			t.Error("a refused event changed the hub")
		}
		status, r, typ := send(t, s, nil, mine)
		switch {
		case require && (status != http.StatusBadRequest || typ != contract.TypeWriteFailed || r.Reason != contract.ReasonForbidden):
			t.Errorf("required, without the attribute: %d %s %+v, want 400 write.failed Forbidden", status, typ, r)
		case !require && (status != http.StatusOK || r.Failed()):
			t.Errorf("not required, without the attribute: %d %+v, want written", status, r)
		}
		if status, r, _ := send(t, s, ptr(mine), mine); status != http.StatusOK || r.Failed() {
			t.Errorf("require=%v, the attribute naming the data's resource: %d %+v, want written", require, status, r)
		}
	}
}
