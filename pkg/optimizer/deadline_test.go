package optimizer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/optimizer"
)

// hardRequest sets up, in namespace ns, an instance whose proof takes the solver many seconds: 20
// clusters with 3 GPU-slice policies each and 100 workloads that each score on their own (every
// workload its own app), and returns the request for it.
func hardRequest(t *testing.T, ns string) optimizer.Params {
	t.Helper()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(33, 77))
	layouts := []struct {
		device       string
		perGPU, perf int
	}{{"all", 1, 90}, {"1g", 7, 20}, {"2g", 3, 40}, {"3g", 2, 60}, {"7g", 1, 85}}
	set := ns + "-set"
	must(t, hub.AddClusterSet(ctx, set, ns))
	p := optimizer.Params{Namespace: ns, Preference: optimizer.Preference{AddonPlacementScore: perf, ScoreDimensionFormat: "${app};${device}"}}
	var apps []string
	for w := range 100 {
		app := fmt.Sprintf("app%03d", w)
		apps = append(apps, app)
		name := "mwrs-" + app
		createWorkload(t, ns, name, app+"-placement", map[string]string{
			optimizer.LabelApp: app, optimizer.LabelRequestKind: "gpu", optimizer.LabelRequestAmount: fmt.Sprint(1 + r.IntN(2)),
		})
		p.TargetWorkloads = append(p.TargetWorkloads, optimizer.Named{Name: name})
	}
	for c := range 20 {
		cluster := fmt.Sprintf("%s-c%02d", ns, c)
		must(t, hub.AddCluster(ctx, cluster, map[string]string{localhub.ClusterSetLabel: set}))
		must(t, hub.MarkAvailable(ctx, cluster))
		gpus := 1 + r.IntN(4)
		pc := optimizer.Cluster{Name: cluster}
		scores := map[string]int32{}
		for _, i := range r.Perm(len(layouts))[:3] {
			l := layouts[i]
			name := fmt.Sprintf("%s-%s", cluster, l.device)
			createPolicy(t, ns, name, map[string]string{
				optimizer.LabelSupplyKind: "gpu", optimizer.LabelSupplyAmount: fmt.Sprint(gpus * l.perGPU), optimizer.LabelSupplyDevice: l.device,
			})
			pc.AvailablePolicies = append(pc.AvailablePolicies, optimizer.Named{Name: name})
			for _, app := range apps {
				scores[app+";"+l.device] = int32(max(-100, min(100, l.perf+r.IntN(31)-15)))
			}
		}
		setScores(t, cluster, perf, scores)
		p.Clusters = append(p.Clusters, pc)
	}
	return p
}

// TestOptimizeAnswersWithinItsDeadline: with a search time limit of an hour and a request
// deadline of 6 s, optimize.requested for an instance the solver needs seconds to prove is
// answered within the deadline (and a little for the HTTP round trip): optimize.done with a plan,
// marked not optimal with a bound no worse than its objective unless proven, or optimize.failed
// 503 Unavailable, retriable. A second request sent at the same time waits for the first only
// until its own deadline, and is answered within it too.
func TestOptimizeAnswersWithinItsDeadline(t *testing.T) {
	const deadline, slack = 6 * time.Second, 1500 * time.Millisecond
	p := hardRequest(t, "deadline")
	url := serve(t, optimizer.Options{TimeLimit: time.Hour, RequestDeadline: deadline, Namespaces: []string{"deadline"}})
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			status, reply := functest.Send(t, url, request(optimizer.TypeRequested, p))
			took := time.Since(start)
			if took > deadline+slack {
				t.Errorf("request %d: answered after %v, deadline %v", i, took, deadline)
			}
			checkDeadlineReply(t, i, status, reply, took)
		}()
	}
	wg.Wait()
}

func checkDeadlineReply(t *testing.T, i, status int, reply *event.Event, took time.Duration) {
	t.Helper()
	switch {
	case reply == nil:
		t.Errorf("request %d: status %d, no reply event", i, status)
	case status == http.StatusOK && reply.Type() == optimizer.TypeDone:
		var plan optimizer.Plan
		if err := json.Unmarshal(reply.Data(), &plan); err != nil {
			t.Fatal(err)
		}
		if plan.Bound < plan.Objective || (plan.Optimal && plan.Bound != plan.Objective) || len(plan.Workloads) != 100 {
			t.Errorf("request %d: plan objective %v, bound %v, optimal %v, %d workloads", i, plan.Objective, plan.Bound, plan.Optimal, len(plan.Workloads))
		}
		t.Logf("request %d: plan %v (bound %v, optimal %v) after %v", i, plan.Objective, plan.Bound, plan.Optimal, took)
	case status == http.StatusServiceUnavailable && reply.Type() == optimizer.TypeFailed:
		var f optimizer.Failure
		if err := json.Unmarshal(reply.Data(), &f); err != nil {
			t.Fatal(err)
		}
		if f.Reason != contract.ReasonUnavailable || !f.Retriable || f.Message == "" {
			t.Errorf("request %d: failure %+v", i, f)
		}
		t.Logf("request %d: 503 %s: %s after %v", i, f.Reason, f.Message, took)
	default:
		t.Errorf("request %d: status %d, reply type %s", i, status, reply.Type())
	}
}
