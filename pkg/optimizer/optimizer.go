package optimizer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
	workclient "open-cluster-management.io/api/client/work/clientset/versioned"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/optimizer/solver"
)

// Resources of the governance policy framework, read and written through the dynamic client (its
// Go module is not linked in).
var (
	PolicyResource           = schema.GroupVersionResource{Group: "policy.open-cluster-management.io", Version: "v1", Resource: "policies"}
	PlacementBindingResource = schema.GroupVersionResource{Group: "policy.open-cluster-management.io", Version: "v1", Resource: "placementbindings"}
)

// Options configure an Optimizer.
type Options struct {
	// Namespaces are the only namespaces whose policies, workloads and Placements a request may
	// name: the deployment's choice (--namespaces), with a Role in each. A request for another is
	// refused before anything is read; none listed refuses every request.
	Namespaces []string
	// LowerIsBetter names AddOnPlacementScores whose lower values are better: minimised when a
	// request sets no goal.
	LowerIsBetter []string
	// TimeLimit bounds one search; when it runs out the best plan found is used and the reply says
	// it is not proven optimal, with the bound.
	TimeLimit time.Duration
	// RequestDeadline bounds a whole request: waiting for the plan before it to be written,
	// reading the hub, the search and the writes. The search stops at TimeLimit or earlier, so
	// that the writes keep a quarter of the time the request has left and at least four times
	// what reading the hub took (they touch about as many objects, and a write takes a few
	// reads' time); a request that cannot answer with
	// a plan by its deadline answers 503 Unavailable (retriable). 0: no deadline beyond the
	// caller's.
	RequestDeadline time.Duration
	// ComplianceClaim, when set, gates each workload Placement on a ClusterClaim: the cluster must
	// claim ComplianceClaim=ComplianceValue (set by a policy watcher once its policies comply).
	ComplianceClaim string
	ComplianceValue string
	// MarkCompliance gates each workload Placement on a label of the hub's ManagedCluster instead:
	// ComplianceLabelPrefix+<namespace> must name the policy the plan chose for the cluster, which
	// Marker sets once the governance propagator reports the policy Compliant there. Unlike a
	// claim it is specific to the plan: a cluster compliant with an earlier plan's policy does not
	// pass.
	MarkCompliance bool
	// Now is the clock (nil: time.Now), for score expiry.
	Now func() time.Time
}

// Optimizer gathers, solves and applies plans on one hub.
type Optimizer struct {
	Cluster clusterclient.Interface
	Work    workclient.Interface
	Dynamic dynamic.Interface
	Opts    Options

	// One plan applied at a time: two interleaved would leave both half there. A channel of one
	// slot rather than a mutex, so that a request waits for its turn only until its deadline.
	turn     chan struct{}
	turnOnce sync.Once
}

// take waits for the optimizer's turn until ctx is done, and reports whether it got it.
func (o *Optimizer) take(ctx context.Context) bool {
	o.turnOnce.Do(func() { o.turn = make(chan struct{}, 1) })
	select {
	case o.turn <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// give ends the turn take began.
func (o *Optimizer) give() { <-o.turn }

// errBusy: the request's deadline passed while another request held the turn.
var errBusy = &Error{Reason: contract.ReasonUnavailable, Status: 503, Message: "another request was planning or writing until this one's deadline"}

// Error is a failure with its reason and HTTP status.
type Error struct {
	Reason  contract.Reason
	Status  int
	Message string
}

func (e *Error) Error() string { return string(e.Reason) + ": " + e.Message }

func fail(status int, reason contract.Reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Status: status, Message: fmt.Sprintf(format, args...)}
}

// hubError classifies an API error: missing objects are the request's fault, the rest the hub's.
func hubError(what string, err error) *Error {
	switch {
	case apierrors.IsNotFound(err):
		return fail(422, ReasonUnknownObject, "%s not found", what)
	case apierrors.IsForbidden(err):
		return fail(500, contract.ReasonForbidden, "%s: the optimizer's RBAC does not allow it: %v", what, err)
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
		return &Error{Reason: contract.ReasonConflict, Status: 503, Message: fmt.Sprintf("%s: %v", what, err)}
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		return fail(422, contract.ReasonRejected, "%s: %v", what, err)
	default:
		return &Error{Reason: contract.ReasonUnavailable, Status: 503, Message: fmt.Sprintf("%s: %v", what, err)}
	}
}

// inputs is what a request resolves to on the hub.
type inputs struct {
	problem   solver.Problem
	workloads []workload
	policies  [][]solver.Policy
	scores    map[string]map[string]float64 // cluster -> score name -> value
	format    string
	minimize  bool
}

type workload struct {
	solver.Workload
	placement string // the Placement its ManifestWorkReplicaSet follows
}

// gather reads every object the request names.
func (o *Optimizer) gather(ctx context.Context, p *Params) (*inputs, *Error) {
	in := &inputs{format: p.Preference.ScoreDimensionFormat, scores: map[string]map[string]float64{}}
	if in.format == "" {
		in.format = DefaultDimensionFormat
	}
	switch p.Preference.Goal {
	case GoalMinimize:
		in.minimize = true
	case "":
		for _, n := range o.Opts.LowerIsBetter {
			in.minimize = in.minimize || n == p.Preference.AddonPlacementScore
		}
	}
	now := time.Now
	if o.Opts.Now != nil {
		now = o.Opts.Now
	}
	var expired, absent []string
	for _, c := range p.Clusters {
		if _, err := o.Cluster.ClusterV1().ManagedClusters().Get(ctx, c.Name, metav1.GetOptions{}); err != nil {
			return nil, hubError("ManagedCluster "+c.Name, err)
		}
		var pols []solver.Policy
		for _, ref := range c.AvailablePolicies {
			obj, err := o.Dynamic.Resource(PolicyResource).Namespace(p.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				return nil, hubError(fmt.Sprintf("Policy %s/%s", p.Namespace, ref.Name), err)
			}
			l := obj.GetLabels()
			amount, err := amountLabel(l, LabelSupplyAmount)
			if err != nil || l[LabelSupplyKind] == "" || l[LabelSupplyDevice] == "" {
				return nil, fail(422, ReasonInvalidObject, "Policy %s/%s needs labels %s, %s (a whole number) and %s", p.Namespace, ref.Name, LabelSupplyKind, LabelSupplyAmount, LabelSupplyDevice)
			}
			pols = append(pols, solver.Policy{Name: ref.Name, Kind: l[LabelSupplyKind], Supply: amount, Device: l[LabelSupplyDevice]})
		}
		in.policies = append(in.policies, pols)
		in.problem.Clusters = append(in.problem.Clusters, solver.Cluster{Name: c.Name, Policies: pols})

		aps, err := o.Cluster.ClusterV1alpha1().AddOnPlacementScores(c.Name).Get(ctx, p.Preference.AddonPlacementScore, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			absent = append(absent, c.Name)
			continue
		case err != nil:
			return nil, hubError("AddOnPlacementScore "+c.Name+"/"+p.Preference.AddonPlacementScore, err)
		}
		// An expired score is no score: placing by it would place by the past.
		if vu := aps.Status.ValidUntil; vu != nil && vu.Time.Before(now()) {
			expired = append(expired, c.Name)
			continue
		}
		m := map[string]float64{}
		for _, s := range aps.Status.Scores {
			m[s.Name] = float64(s.Value)
		}
		in.scores[c.Name] = m
	}
	for _, ref := range p.TargetWorkloads {
		mw, err := o.Work.WorkV1alpha1().ManifestWorkReplicaSets(p.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return nil, hubError(fmt.Sprintf("ManifestWorkReplicaSet %s/%s", p.Namespace, ref.Name), err)
		}
		l := mw.Labels
		amount, err := amountLabel(l, LabelRequestAmount)
		if err != nil || l[LabelApp] == "" || l[LabelRequestKind] == "" {
			return nil, fail(422, ReasonInvalidObject, "ManifestWorkReplicaSet %s/%s needs labels %s, %s and %s (a whole number)", p.Namespace, ref.Name, LabelApp, LabelRequestKind, LabelRequestAmount)
		}
		if len(mw.Spec.PlacementRefs) == 0 {
			return nil, fail(422, ReasonInvalidObject, "ManifestWorkReplicaSet %s/%s has no placementRefs: no Placement would deploy it", p.Namespace, ref.Name)
		}
		w := workload{Workload: solver.Workload{Name: ref.Name, App: l[LabelApp], Kind: l[LabelRequestKind], Demand: amount}, placement: mw.Spec.PlacementRefs[0].Name}
		in.workloads = append(in.workloads, w)
		in.problem.Workloads = append(in.problem.Workloads, w.Workload)
	}
	if len(in.scores) == 0 {
		return nil, fail(422, ReasonMissingScores, "no cluster has a current AddOnPlacementScore %q (missing: %s; expired: %s)", p.Preference.AddonPlacementScore, list(absent), list(expired))
	}
	in.problem.Minimize = in.minimize
	in.problem.Score = func(w, c, pi int) (float64, bool) {
		cl := in.problem.Clusters[c]
		v, ok := in.scores[cl.Name][ScoreName(in.format, in.problem.Workloads[w].App, cl.Policies[pi].Device)]
		return v, ok
	}
	return in, nil
}

// searchLimit is how long the search may run: limit (0: unlimited), but never into what the writes
// need of the time ctx has left: a quarter of it, and at least reserve. ok is false when no time
// is left.
func searchLimit(ctx context.Context, limit, reserve time.Duration) (time.Duration, bool) {
	dl, has := ctx.Deadline()
	if !has {
		return limit, true
	}
	left := time.Until(dl)
	left -= max(left/4, reserve)
	if left <= 0 {
		return 0, false
	}
	if limit <= 0 || left < limit {
		limit = left
	}
	return limit, true
}

func amountLabel(l map[string]string, key string) (int64, error) {
	v, err := strconv.ParseInt(l[key], 10, 64)
	if err == nil && v < 0 {
		err = errors.New("negative")
	}
	return v, err
}

func list(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// Optimize gathers, solves and applies a plan within the request's deadline; id names it on the
// hub.
func (o *Optimizer) Optimize(ctx context.Context, p *Params, id string) (*Plan, *Error) {
	if ferr := o.allow(p.Namespace); ferr != nil {
		return nil, ferr
	}
	if o.Opts.RequestDeadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Opts.RequestDeadline)
		defer cancel()
	}
	if !o.take(ctx) {
		return nil, errBusy
	}
	defer o.give()
	read := time.Now()
	in, ferr := o.gather(ctx, p)
	if ferr != nil {
		return nil, ferr
	}
	limit, ok := searchLimit(ctx, o.Opts.TimeLimit, 4*time.Since(read))
	if !ok {
		return nil, &Error{Reason: contract.ReasonUnavailable, Status: 503, Message: "reading the hub took the request's time: none left to search"}
	}
	sol, err := solver.Solve(ctx, in.problem, solver.Options{TimeLimit: limit})
	switch {
	case errors.Is(err, solver.ErrNoOption):
		return nil, fail(422, ReasonMissingScores, "%v", err)
	case errors.Is(err, solver.ErrInfeasible):
		return nil, fail(422, ReasonInfeasible, "%v", err)
	case errors.Is(err, solver.ErrInvalid):
		return nil, fail(422, ReasonInvalidObject, "%v", err)
	case ctx.Err() != nil:
		return nil, &Error{Reason: contract.ReasonUnavailable, Status: 503, Message: "the request ended before a plan was found"}
	case errors.Is(err, solver.ErrStopped):
		return nil, &Error{Reason: contract.ReasonUnavailable, Status: 503, Message: fmt.Sprintf("no plan found within the search's time limit (%v): %v", limit.Round(time.Millisecond), err)}
	case err != nil:
		return nil, &Error{Reason: contract.ReasonUnavailable, Status: 503, Message: err.Error()}
	}
	plan := &Plan{ID: id, Namespace: p.Namespace, Preference: p.Preference, Objective: sol.Objective, Optimal: sol.Optimal, Bound: sol.Bound}
	if plan.Preference.ScoreDimensionFormat == "" {
		plan.Preference.ScoreDimensionFormat = DefaultDimensionFormat
	}
	if plan.Preference.Goal == "" {
		plan.Preference.Goal = GoalMaximize
		if in.minimize {
			plan.Preference.Goal = GoalMinimize
		}
	}
	demand := make([]int64, len(p.Clusters))
	for wi, ci := range sol.Cluster {
		w := in.workloads[wi]
		c := in.problem.Clusters[ci]
		pol := c.Policies[sol.Policy[ci]]
		name := ScoreName(in.format, w.App, pol.Device)
		demand[ci] += w.Demand
		plan.Workloads = append(plan.Workloads, PlannedWork{Name: w.Name, Cluster: c.Name, Placement: w.placement, ScoreName: name, Score: in.scores[c.Name][name]})
	}
	for ci, c := range in.problem.Clusters {
		pol := c.Policies[sol.Policy[ci]]
		plan.Clusters = append(plan.Clusters, PlannedCluster{Name: c.Name, Policy: pol.Name, Device: pol.Device, Kind: pol.Kind, Supply: pol.Supply, Demand: demand[ci],
			Placement: "placement-" + c.Name + "-" + id, Binding: "binding-" + c.Name + "-" + id})
	}
	if ferr := o.apply(ctx, plan); ferr != nil {
		return nil, ferr
	}
	return plan, nil
}
