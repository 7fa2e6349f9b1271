package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scoreflow/scoreflow/harness/manifests"
)

// sendsOnlyWith names the functions that send to a sink only in a mode their Service turns on with
// an environment variable: the latency-scorer sends as an agent (CLUSTER set, deploy/managed-cluster/)
// and only replies on the hub.
var sendsOnlyWith = map[string]string{"latency-scorer": "CLUSTER"}

// TestSendersHaveASinkBinding: every Service or Deployment running a function that sends besides replying (its
// main registers pkg/function's SinkFlags or OptionalSinkFlags: sources, the dead-letter function,
// the scorers whose large results are split across several events) is the subject of a SinkBinding
// in the same set, since nothing else gives it K_SINK on a cluster. Without one, a scorer answers a
// result over one event's bounds with 500.
func TestSendersHaveASinkBinding(t *testing.T) {
	n := 0
	for name, s := range allSets(t) {
		bound := map[string]bool{}
		for _, it := range s.SinkBindings {
			subj := it.Object.Spec.Subject
			bound[subj.APIVersion+"/"+subj.Kind+" "+it.Object.Namespace+"/"+subj.Name] = true
		}
		for _, w := range s.Workloads() {
			c := w.Template.Spec.Containers
			if len(c) != 1 {
				continue // TestFunctionServices reports it
			}
			fn := functionName(c[0].Image)
			if fn == "" {
				continue
			}
			src, err := os.ReadFile(filepath.Join(repo, "functions", fn, "main.go"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(src), "SinkFlags()") {
				continue
			}
			if env, ok := sendsOnlyWith[fn]; ok && envValue(c[0], env) == "" {
				continue
			}
			n++
			if !bound[w.Kind.GroupVersion().String()+"/"+w.Kind.Kind+" "+w.ObjectMeta.Namespace+"/"+w.ObjectMeta.Name] {
				t.Errorf("%s (set %s): %s %s runs %s, which sends to K_SINK, but no SinkBinding has it as subject", w.Source, name, w.Kind.Kind, w.ObjectMeta.Name, fn)
			}
		}
	}
	if n < 9 {
		t.Errorf("found %d sending Services, want at least 9 (the check may have stopped seeing them)", n)
	}
}

// TestPlayerSendsToTheBroker: cloudevents-player's form posts to BROKER_URI when it is set, else to
// K_SINK (ruromero/cloudevents-player, MessageService.getKnativeBrokerUri). In every variant it has
// no BROKER_URI and a SinkBinding to the set's Broker, so that it posts where that Broker listens,
// the Kafka-backed one's ingress included, over https with transport encryption.
func TestPlayerSendsToTheBroker(t *testing.T) {
	for name, s := range allSets(t) {
		svc, ok := manifests.Find(s.Services, Namespace, "cloudevents-player")
		if !ok {
			continue
		}
		for _, c := range svc.Object.Spec.Template.Spec.Containers {
			if v := envValue(c, "BROKER_URI"); v != "" {
				t.Errorf("set %s: cloudevents-player posts to BROKER_URI=%s, fixed whatever the Broker", name, v)
			}
		}
		bound := false
		for _, b := range s.SinkBindings {
			subj, sink := b.Object.Spec.Subject, b.Object.Spec.Sink.Ref
			if b.Object.Namespace == Namespace && subj.Kind == "Service" && subj.Name == "cloudevents-player" &&
				sink != nil && sink.Kind == "Broker" && sink.Name == BrokerName {
				bound = true
			}
		}
		if !bound {
			t.Errorf("set %s: no SinkBinding gives cloudevents-player the Broker %s as K_SINK", name, BrokerName)
		}
		if _, ok := manifests.Find(s.Brokers, Namespace, BrokerName); !ok {
			t.Errorf("set %s has cloudevents-player but no Broker %s", name, BrokerName)
		}
	}
}
