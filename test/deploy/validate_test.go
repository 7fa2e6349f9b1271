package deploy

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventingduckv1 "knative.dev/eventing/pkg/apis/duck/v1"
	eventingv1 "knative.dev/eventing/pkg/apis/eventing/v1"
	"knative.dev/eventing/pkg/apis/feature"
	sourcesv1 "knative.dev/eventing/pkg/apis/sources/v1"
	"knative.dev/pkg/apis"
	"knative.dev/pkg/ptr"
	servingconfig "knative.dev/serving/pkg/apis/config"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/scoreflow/scoreflow/harness/manifests"
)

// admissionContext is what the Knative webhooks validate a create with: the eventing feature flags
// as config-features ships them (delivery timeout enabled, ...), serving's default config-defaults,
// config-features and config-autoscaler, and the create operation.
func admissionContext(t testing.TB) context.Context {
	t.Helper()
	return admissionContextWith(t, nil)
}

// admissionContextWith is admissionContext with some of config-features set: a variant's
// admission on a cluster configured for it (setFeatures).
func admissionContextWith(t testing.TB, features map[string]string) context.Context {
	t.Helper()
	flags, err := feature.NewFlagsConfigFromMap(features)
	if err != nil {
		t.Fatal(err)
	}
	ctx := feature.ToContext(context.Background(), flags)
	ctx = servingconfig.ToContext(ctx, servingconfig.FromContextOrDefaults(ctx))
	return apis.WithinCreate(ctx)
}

// knativeObject is what the Knative webhooks do to an object: default it, then validate it.
type knativeObject interface {
	apis.Defaultable
	apis.Validatable
}

// admit defaults and validates obj as the webhooks would on create.
func admit(ctx context.Context, obj knativeObject) *apis.FieldError {
	obj.SetDefaults(ctx)
	return obj.Validate(ctx)
}

// knativeObjects returns every Knative object of s, named for subtests, copied so that defaulting
// leaves the loaded set as written.
func knativeObjects(s *manifests.Set) map[string]knativeObject {
	out := map[string]knativeObject{}
	for _, it := range s.Brokers {
		out["Broker/"+it.Object.Name] = it.Object.DeepCopy()
	}
	for _, it := range s.Triggers {
		out["Trigger/"+it.Object.Name] = it.Object.DeepCopy()
	}
	for _, it := range s.PingSources {
		out["PingSource/"+it.Object.Name] = it.Object.DeepCopy()
	}
	for _, it := range s.ApiServerSources {
		out["ApiServerSource/"+it.Object.Name] = it.Object.DeepCopy()
	}
	for _, it := range s.SinkBindings {
		out["SinkBinding/"+it.Object.Name] = it.Object.DeepCopy()
	}
	for _, it := range s.Services {
		out["Service/"+it.Object.Name] = it.Object.DeepCopy()
	}
	for _, it := range s.EventPolicies {
		out["EventPolicy/"+it.Object.Name] = it.Object.DeepCopy()
	}
	for _, it := range s.EventTypes {
		out["EventType/"+it.Object.Name] = it.Object.DeepCopy()
	}
	return out
}

// TestKnativeValidation: every Broker, Trigger, source and Knative Service passes the same
// defaulting and validation the Knative admission webhooks apply. (ko:// images pass as they are:
// go-containerregistry's weak validation, which serving uses, parses them; and ko resolves them
// before anything reaches the cluster.) Webhook warnings are allowed for images built elsewhere
// and logged, but not for scoreflow's own functions: those run with a fully secure context.
func TestKnativeValidation(t *testing.T) {
	for name, s := range allSets(t) {
		objs := knativeObjects(s)
		if len(objs) == 0 {
			t.Errorf("%s: no Knative objects", name)
		}
		for _, key := range sortedKeys(objs) {
			t.Run(name+"/"+key, func(t *testing.T) {
				fe := admit(admissionContextWith(t, setFeatures[name]), objs[key])
				if err := fe.Filter(apis.ErrorLevel); err != nil {
					t.Errorf("rejected: %v", err)
				}
				if warn := fe.Filter(apis.WarningLevel); warn != nil {
					own := false
					if svc, ok := objs[key].(*servingv1.Service); ok {
						own = functionName(svc.Spec.Template.Spec.Containers[0].Image) != ""
					}
					if own {
						t.Errorf("warning for a scoreflow function: %v", warn)
					} else {
						t.Logf("webhook warning (allowed, the image is not ours): %v", warn)
					}
				}
			})
		}
	}
}

// TestKnativeValidationRejects proves the validation above is live: small mistakes in copies of the
// real objects are refused, each with the field it is about.
func TestKnativeValidationRejects(t *testing.T) {
	s := load(t, setHub)
	broker := func() *eventingv1.Broker { return s.Brokers[0].Object.DeepCopy() }
	trigger := func(name string) *eventingv1.Trigger {
		it, ok := manifests.Find(s.Triggers, Namespace, name)
		if !ok {
			t.Fatalf("trigger %s not found", name)
		}
		return it.Object.DeepCopy()
	}
	service := func(name string) *servingv1.Service {
		it, ok := manifests.Find(s.Services, Namespace, name)
		if !ok {
			t.Fatalf("service %s not found", name)
		}
		return it.Object.DeepCopy()
	}
	tests := []struct {
		name string
		obj  func() knativeObject
		want string
	}{
		{"broker backoff policy", func() knativeObject {
			b := broker()
			p := eventingduckv1.BackoffPolicyType("random")
			b.Spec.Delivery.BackoffPolicy = &p
			return b
		}, "spec.delivery.backoffPolicy"},
		{"trigger timeout not ISO 8601", func() knativeObject {
			tr := trigger("score-writer")
			tr.Spec.Delivery.Timeout = ptr.String("45s")
			return tr
		}, "spec.delivery.timeout"},
		{"trigger filter with two dialects", func() knativeObject {
			tr := trigger("score-writer")
			tr.Spec.Filters[0].Prefix = map[string]string{"source": "scoreflow/"}
			return tr
		}, "multiple dialects"},
		{"trigger filter attribute not a CloudEvents name", func() knativeObject {
			tr := trigger("static-scorer")
			tr.Spec.Filters[1].Exact = map[string]string{"Scorer-Name": "x"}
			return tr
		}, "spec.filters[1].exact"},
		{"service without image", func() knativeObject {
			svc := service("score-writer")
			svc.Spec.Template.Spec.Containers[0].Image = ""
			return svc
		}, "spec.template.spec.containers[0].image"},
		{"service sets the reserved PORT", func() knativeObject {
			svc := service("score-writer")
			c := &svc.Spec.Template.Spec.Containers[0]
			c.Env = append(c.Env, corev1.EnvVar{Name: "PORT", Value: "9090"})
			return svc
		}, "PORT"},
		{"service mounts a token it may not", func() knativeObject {
			svc := service("resource-scorer")
			svc.Spec.Template.Spec.AutomountServiceAccountToken = ptr.Bool(true)
			return svc
		}, "automountServiceAccountToken"},
		{"ping schedule", func() knativeObject {
			p := s.PingSources[0].Object.DeepCopy()
			p.Spec.Schedule = "every minute"
			return p
		}, "spec.schedule"},
		{"ping data not JSON", func() knativeObject {
			p := s.PingSources[0].Object.DeepCopy()
			p.Spec.Data = "{resource: x"
			return p
		}, "spec.data"},
		{"apiserversource mode", func() knativeObject {
			a := s.ApiServerSources[0].Object.DeepCopy()
			a.Spec.EventMode = "Everything"
			return a
		}, "spec.mode"},
		{"sinkbinding without subject name", func() knativeObject {
			b := s.SinkBindings[0].Object.DeepCopy()
			b.Spec.Subject.Name = ""
			return b
		}, "spec.subject"},
		{"sink without ref or uri", func() knativeObject {
			b := s.SinkBindings[0].Object.DeepCopy()
			b.Spec.Sink = sourcesv1.SinkBindingSpec{}.Sink
			return b
		}, "spec.sink"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := admit(admissionContext(t), tt.obj()).Filter(apis.ErrorLevel)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}
