// Package optimizer is the optimizer function's logic: it reads an optimisation request (the
// Dynamic Scoring Framework's params document), gathers from the OCM hub the preference scores
// (AddOnPlacementScores), each workload's demand (ManifestWorkReplicaSet labels) and each policy's
// supply (Policy labels), solves the plan with package optimize, and writes it back to the hub as
// Placements and PlacementBindings labelled with the plan's id.
package optimizer

import (
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Event types the optimizer takes and sends.
const (
	TypeRequested      = "io.scoreflow.optimize.requested"
	TypeDone           = "io.scoreflow.optimize.done"
	TypeFailed         = "io.scoreflow.optimize.failed"
	TypeResetRequested = "io.scoreflow.optimize.reset.requested"
	TypeResetDone      = "io.scoreflow.optimize.reset.done"
)

// Reasons of optimize.failed beyond the contract's.
const (
	ReasonUnknownObject contract.Reason = "UnknownObject" // a named cluster, policy or workload does not exist
	ReasonInvalidObject contract.Reason = "InvalidObject" // a policy or workload lacks or misspells its supply/demand labels
	ReasonMissingScores contract.Reason = "MissingScores" // a workload has no preference score where it could run
	ReasonInfeasible    contract.Reason = "Infeasible"    // no plan fits the supply
)

// Labels read from the hub's objects.
const (
	LabelApp           = "app"
	LabelRequestKind   = "resource-request-kind"
	LabelRequestAmount = "resource-request-amount"
	LabelSupplyKind    = "resource-supply-kind"
	LabelSupplyAmount  = "resource-supply-amount"
	LabelSupplyDevice  = "resource-supply-device"
)

// Labels the optimizer puts on what it generates.
const (
	LabelGenerated = "optimizer.scoreflow.io/generated"
	LabelPlan      = "optimizer.scoreflow.io/plan"
	// LabelCluster, on a PlacementBinding, names the cluster its policy is bound to.
	LabelCluster = "optimizer.scoreflow.io/cluster"
	// ComplianceLabelPrefix + <namespace>, on a ManagedCluster, names the policy of that namespace
	// the cluster complies with (set by Marker; selected by the workload Placements).
	ComplianceLabelPrefix = "compliance.optimizer.scoreflow.io/"
)

// DefaultDimensionFormat is how score names combine app and device when the request sets none.
const DefaultDimensionFormat = "${app};${device}"

// Params is an optimisation request, DSF's params document.
type Params struct {
	Namespace       string     `json:"namespace"`
	Clusters        []Cluster  `json:"clusters"`
	TargetWorkloads []Named    `json:"targetWorkloads"`
	Preference      Preference `json:"preference"`
}

// Cluster is a managed cluster and the policies it may be given.
type Cluster struct {
	Name              string  `json:"name"`
	AvailablePolicies []Named `json:"availablePolicies"`
}

// Named names an object in the request's namespace.
type Named struct {
	Name string `json:"name"`
}

// Preference says which scores to optimise.
type Preference struct {
	// AddonPlacementScore is the AddOnPlacementScore whose scores are optimised. DSF's MCP sample
	// (samples/dynamic-scoring-framework-mcp/examples/params.json) spells the key
	// addOnPlacementScore, as the kind is spelt; both spellings are read, Validate keeps the name
	// here.
	AddonPlacementScore string `json:"addonPlacementScore,omitempty"`
	// DSFAddOnPlacementScore is DSF's spelling of the same key; Validate moves it to
	// AddonPlacementScore.
	DSFAddOnPlacementScore string `json:"addOnPlacementScore,omitempty"`
	ScoreDimensionFormat   string `json:"scoreDimensionFormat,omitempty"`
	// Goal is maximize or minimize (a scoreflow extension). Empty: minimize when the score is one
	// the optimizer is configured to treat as lower-is-better, maximize otherwise.
	Goal string `json:"goal,omitempty"`
}

// Goals.
const (
	GoalMaximize = "maximize"
	GoalMinimize = "minimize"
)

var placeholder = regexp.MustCompile(`\$\{([A-Za-z]+)\}`)

// Validate checks the document's shape; objects are checked against the hub later.
func (p *Params) Validate() error {
	var errs contract.FieldErrors
	bad := func(field, format string, args ...any) {
		errs = append(errs, contract.FieldError{Field: field, Reason: contract.ReasonInvalidData, Message: fmt.Sprintf(format, args...)})
	}
	dns := func(field, name string) {
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			bad(field, "%q: %s", name, strings.Join(msgs, "; "))
		}
	}
	if msgs := validation.IsDNS1123Label(p.Namespace); len(msgs) > 0 {
		bad("namespace", "%q: %s", p.Namespace, strings.Join(msgs, "; "))
	}
	if len(p.Clusters) == 0 {
		bad("clusters", "is empty")
	}
	seen := map[string]bool{}
	for i, c := range p.Clusters {
		f := fmt.Sprintf("clusters[%d]", i)
		if err := contract.ValidateClusterName(c.Name); err != nil {
			bad(f+".name", "%v", err)
		}
		if seen["c/"+c.Name] {
			bad(f+".name", "%q appears twice", c.Name)
		}
		seen["c/"+c.Name] = true
		if len(c.AvailablePolicies) == 0 {
			bad(f+".availablePolicies", "is empty")
		}
		for j, pol := range c.AvailablePolicies {
			dns(fmt.Sprintf("%s.availablePolicies[%d].name", f, j), pol.Name)
		}
	}
	if len(p.TargetWorkloads) == 0 {
		bad("targetWorkloads", "is empty")
	}
	for i, w := range p.TargetWorkloads {
		f := fmt.Sprintf("targetWorkloads[%d].name", i)
		dns(f, w.Name)
		if seen["w/"+w.Name] {
			bad(f, "%q appears twice", w.Name)
		}
		seen["w/"+w.Name] = true
	}
	switch pref := &p.Preference; {
	case pref.DSFAddOnPlacementScore == "":
		dns("preference.addonPlacementScore", pref.AddonPlacementScore)
	case pref.AddonPlacementScore != "":
		bad("preference.addOnPlacementScore", "is given beside addonPlacementScore: name the score once (either spelling)")
	default:
		pref.AddonPlacementScore, pref.DSFAddOnPlacementScore = pref.DSFAddOnPlacementScore, ""
		dns("preference.addOnPlacementScore", pref.AddonPlacementScore)
	}
	format := p.Preference.ScoreDimensionFormat
	if format == "" {
		format = DefaultDimensionFormat
	}
	has := map[string]bool{}
	for _, m := range placeholder.FindAllStringSubmatch(format, -1) {
		has[m[1]] = true
		if m[1] != "app" && m[1] != "device" {
			bad("preference.scoreDimensionFormat", "placeholder ${%s}: only ${app} and ${device} are known when optimising", m[1])
		}
	}
	if !has["app"] || !has["device"] {
		bad("preference.scoreDimensionFormat", "%q must contain ${app} and ${device}", format)
	}
	switch p.Preference.Goal {
	case "", GoalMaximize, GoalMinimize:
	default:
		bad("preference.goal", "is %q, want maximize or minimize", p.Preference.Goal)
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// ScoreName is the score name of app on device under format.
func ScoreName(format, app, device string) string {
	if format == "" {
		format = DefaultDimensionFormat
	}
	return strings.NewReplacer("${app}", app, "${device}", device).Replace(format)
}

// Plan is the answer: what goes where, why, and what was written.
type Plan struct {
	Input      *contract.EventRef `json:"input,omitempty"`
	ID         string             `json:"plan"`
	Namespace  string             `json:"namespace"`
	Preference Preference         `json:"preference"`
	// Objective is the sum of the chosen options' scores; Optimal says the search proved no plan
	// is better; otherwise Bound is the best any plan could reach.
	Objective         float64          `json:"objective"`
	Optimal           bool             `json:"optimal"`
	Bound             float64          `json:"bound"`
	Clusters          []PlannedCluster `json:"clusters"`
	Workloads         []PlannedWork    `json:"workloads"`
	Placements        []string         `json:"placements"`
	PlacementBindings []string         `json:"placementBindings"`
	Removed           []string         `json:"removed,omitempty"` // a previous plan's objects, deleted
}

// PlannedCluster is one cluster's chosen policy.
type PlannedCluster struct {
	Name      string `json:"name"`
	Policy    string `json:"policy"`
	Device    string `json:"device"`
	Kind      string `json:"kind"`
	Supply    int64  `json:"supply"`
	Demand    int64  `json:"demand"`
	Placement string `json:"placement"`
	Binding   string `json:"placementBinding"`
}

// PlannedWork is one workload's chosen cluster and the score that counted.
type PlannedWork struct {
	Name      string  `json:"name"`
	Cluster   string  `json:"cluster"`
	Placement string  `json:"placement"`
	ScoreName string  `json:"scoreName"`
	Score     float64 `json:"score"`
}

// Failure is the data of optimize.failed.
type Failure struct {
	Input     *contract.EventRef `json:"input,omitempty"`
	Reason    contract.Reason    `json:"reason"`
	Message   string             `json:"message"`
	Retriable bool               `json:"retriable,omitempty"`
}

// ResetRequest asks to remove generated objects: every plan's in Namespace, or only Plan's.
type ResetRequest struct {
	Namespace string `json:"namespace"`
	Plan      string `json:"plan,omitempty"`
}

// Validate checks a reset request.
func (r *ResetRequest) Validate() error {
	if msgs := validation.IsDNS1123Label(r.Namespace); len(msgs) > 0 {
		return contract.FieldErrors{{Field: "namespace", Reason: contract.ReasonInvalidData, Message: fmt.Sprintf("%q: %s", r.Namespace, strings.Join(msgs, "; "))}}
	}
	if msgs := validation.IsValidLabelValue(r.Plan); len(msgs) > 0 {
		return contract.FieldErrors{{Field: "plan", Reason: contract.ReasonInvalidData, Message: strings.Join(msgs, "; ")}}
	}
	return nil
}

// ResetResult is the data of optimize.reset.done.
type ResetResult struct {
	Input     *contract.EventRef `json:"input,omitempty"`
	Namespace string             `json:"namespace"`
	Plan      string             `json:"plan,omitempty"`
	Removed   []string           `json:"removed"`
}
