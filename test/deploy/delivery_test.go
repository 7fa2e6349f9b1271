package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestScorerDeliveryAsDocumented keeps docs/performance.md's account of how long a scorer may
// take true: a scorer's Trigger that sets a delivery of its own (which replaces the broker's as a
// whole, timeout included) is named there with its timeout, as "name (`PT...`)", and every other
// scorer's Trigger leaves the broker's 30 s.
func TestScorerDeliveryAsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repo, "docs", "performance.md"))
	if err != nil {
		t.Fatal(err)
	}
	scorers := 0
	for name, s := range allSets(t) {
		for _, b := range s.Brokers {
			if d := b.Object.Spec.Delivery; d == nil || d.Timeout == nil || *d.Timeout != "PT30S" {
				t.Errorf("set %s: Broker %s (%s): delivery timeout is not the PT30S docs/performance.md states", name, b.Object.Name, b.Source)
			}
		}
		for _, tr := range s.Triggers {
			ref := tr.Object.Spec.Subscriber.Ref
			if ref == nil || !(strings.HasSuffix(ref.Name, "-scorer") || ref.Name == "dsf-bridge") {
				continue
			}
			scorers++
			d := tr.Object.Spec.Delivery
			if d == nil {
				continue
			}
			if d.Timeout == nil {
				t.Errorf("set %s: Trigger %s (%s) sets a delivery without a timeout: Knative's default replaces the broker's 30 s", name, tr.Object.Name, tr.Source)
				continue
			}
			if want := tr.Object.Name + " (`" + *d.Timeout + "`"; !strings.Contains(string(doc), want) {
				t.Errorf("set %s: Trigger %s (%s) sets its own delivery timeout %s; docs/performance.md does not name it as %q", name, tr.Object.Name, tr.Source, *d.Timeout, want)
			}
		}
	}
	if scorers == 0 {
		t.Fatal("found no scorer Trigger: the rule above checked nothing")
	}
}
