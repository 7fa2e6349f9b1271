// Package monitoring_test checks the Grafana dashboard, the Prometheus alerting rules and the
// PodMonitor in this directory: the rule files pass the checks `promtool check rules` makes (the
// Prometheus module's own rulefmt), every panel's and rule's PromQL runs in a real Prometheus that
// scrapes the real score-writer, static-scorer and dead-letter binaries after they have done work,
// and the scrape configuration the Prometheus Operator renders from the PodMonitor makes a real
// Prometheus discover and scrape a function's pod (podmonitor_test.go).
package monitoring_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/proc"
	"github.com/scoreflow/scoreflow/harness/promserver"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

const (
	rulesFile     = "alerts.rules.yaml"
	ruleCRFile    = "prometheusrule.yaml"
	dashboardFile = "dashboards/scoreflow.json"
	configMapFile = "grafana-dashboard-configmap.yaml"
)

// knativeMetric marks the broker's own metrics (Knative Eventing's OpenTelemetry metrics exported
// for Prometheus): no Knative runs here, so their panels are parsed but not expected to have data.
const knativeMetric = "kn_"

type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// query is one PromQL expression of the dashboard or the rules, named for failure messages.
type query struct{ name, expr string }

func loadDashboard(t *testing.T) (dashboard, []byte) {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d, raw
}

// panelQueries are the dashboard's expressions with its template variables as "All" selects them.
func panelQueries(t *testing.T) []query {
	d, _ := loadDashboard(t)
	var qs []query
	for _, p := range d.Panels {
		for i, target := range p.Targets {
			qs = append(qs, query{fmt.Sprintf("panel %q target %d", p.Title, i), strings.ReplaceAll(target.Expr, "$cluster", ".*")})
		}
	}
	if len(qs) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	return qs
}

// ruleGroups parses the rule file as Prometheus and promtool do, with every check they make
// (PromQL, templates of labels and annotations, names, durations).
func ruleGroups(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	groups, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation)
	for _, err := range errs {
		t.Errorf("%s: %v", rulesFile, err)
	}
	if groups == nil || len(groups.Groups) == 0 {
		t.Fatalf("%s has no rule groups", rulesFile)
	}
	return groups
}

func ruleQueries(t *testing.T) []query {
	var qs []query
	for _, g := range ruleGroups(t).Groups {
		for _, r := range g.Rules {
			qs = append(qs, query{"rule " + r.Alert + r.Record, r.Expr})
		}
	}
	return qs
}

func TestRulesPassPromtoolChecks(t *testing.T) {
	groups := ruleGroups(t)
	alerts := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = true
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("alert %s lacks a severity label or a summary", r.Alert)
			}
		}
	}
	for _, want := range []string{"ScoreflowScoresStale", "ScoreflowWriterRefusals", "ScoreflowDeadLetters"} {
		if !alerts[want] {
			t.Errorf("%s has no alert %s", rulesFile, want)
		}
	}
}

// The PrometheusRule carries exactly the plain file's groups, so the two never drift apart.
func TestPrometheusRuleMatchesRuleFile(t *testing.T) {
	var cr struct {
		Kind string          `json:"kind"`
		Spec json.RawMessage `json:"spec"`
	}
	read := func(path string, into any) {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(raw, into); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	var plainGroups, crGroups any
	read(rulesFile, &plainGroups)
	read(ruleCRFile, &cr)
	if cr.Kind != "PrometheusRule" {
		t.Fatalf("%s is a %q", ruleCRFile, cr.Kind)
	}
	if err := json.Unmarshal(cr.Spec, &crGroups); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(plainGroups, crGroups) {
		t.Errorf("%s spec differs from %s:\n%v\n%v", ruleCRFile, rulesFile, crGroups, plainGroups)
	}
}

// The ConfigMap the Grafana sidecar picks up holds exactly the dashboard file.
func TestConfigMapHoldsTheDashboard(t *testing.T) {
	_, want := loadDashboard(t)
	raw, err := os.ReadFile(configMapFile)
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(raw, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Kind != "ConfigMap" || cm.Metadata.Labels["grafana_dashboard"] != "1" {
		t.Errorf("%s: kind %q labels %v, want a ConfigMap labelled grafana_dashboard: \"1\"", configMapFile, cm.Kind, cm.Metadata.Labels)
	}
	if cm.Data["scoreflow.json"] != string(want) {
		t.Errorf("%s's scoreflow.json differs from %s: run monitoring/gen-dashboard.py", configMapFile, dashboardFile)
	}
}

func TestPanelQueriesParse(t *testing.T) {
	for _, q := range panelQueries(t) {
		if _, err := parser.ParseExpr(q.expr); err != nil {
			t.Errorf("%s: %v", q.name, err)
		}
	}
}

// TestQueriesReturnDataFromRunningFunctions runs the functions as their images do, drives a
// written score, a refusal and a dead letter through them, has a real Prometheus scrape them and
// evaluate the rules, and checks that every panel returns data, every metric a rule names exists,
// every rule evaluates without error, and the alerts for what was driven fire while the stale-score
// alert stays quiet.
func TestQueriesReturnDataFromRunningFunctions(t *testing.T) {
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	ctx := context.Background()
	for _, c := range []string{"cluster1", "cluster2"} {
		if err := hub.AddCluster(ctx, c, nil); err != nil {
			t.Fatal(err)
		}
		if err := hub.AcceptCluster(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := hub.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	table := filepath.Join(dir, "table.yaml")
	if err := os.WriteFile(table, []byte(`resources:
  - {name: performance, value: performance, normalize: {method: minmax}}
rows:
  - {cluster: cluster1, app: app01, device: gpu0, performance: 90}
  - {cluster: cluster2, app: app01, device: gpu0, performance: 60}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	broker := functest.NewSink(t, nil)
	writer := startFunction(t, dir, "score-writer", "KUBECONFIG="+kubeconfig, "TTL=3m", "POD_NAMESPACE=default") // its Lease: where a pod's token would say
	scorer := startFunction(t, dir, "static-scorer", "TABLE="+table)
	deadLetter := startFunction(t, dir, "dead-letter", "K_SINK="+broker.URL)

	// A scorer's scores, written.
	status, reply := functest.Send(t, scorer.url, functest.Ping(`{"resource":"performance"}`))
	if status != http.StatusOK || reply == nil || reply.Type() != contract.TypeScoreUpdated {
		t.Fatalf("static-scorer answered %d %v", status, reply)
	}
	if status, reply := functest.Send(t, writer.url, *reply); status != http.StatusOK || reply == nil || reply.Type() != contract.TypeWriteDone {
		t.Fatalf("score-writer answered %d %v", status, reply)
	}
	// A refusal: out of range.
	bad := cloudevents.NewEvent()
	bad.SetID("bad-1")
	bad.SetSource("monitoring-test")
	bad.SetType(contract.TypeScoreUpdated)
	bad.SetTime(time.Now())
	_ = bad.SetData(cloudevents.ApplicationJSON, contract.ScoreUpdated{Resource: "performance", Items: []contract.ClusterScores{functest.ClusterScores("cluster1", "x", 150)}})
	if status, reply := functest.Send(t, writer.url, bad); status != http.StatusUnprocessableEntity || reply == nil || reply.Type() != contract.TypeWriteFailed {
		t.Fatalf("score-writer answered the out-of-range score %d %v", status, reply)
	}
	// A dead letter: the broker hands over the refused event.
	bad.SetExtension("knativeerrorcode", "422")
	bad.SetExtension("knativeerrordest", "http://score-writer.scoreflow.svc.cluster.local")
	if status, _ := functest.Send(t, deadLetter.url, bad); status != http.StatusAccepted {
		t.Fatalf("dead-letter answered %d", status)
	}

	rules, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, f := range []*function{writer, scorer, deadLetter} {
		targets = append(targets, fmt.Sprintf("  - job_name: %s\n    static_configs:\n      - targets: [%q]\n", f.name, strings.TrimPrefix(f.url, "http://")))
	}
	prom := promserver.StartConfig(t, fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [%q]\nscrape_configs:\n%s", rules, strings.Join(targets, "")))
	client := promserver.Client(t, prom.URL)

	nonEmpty := func(expr string) (int, error) {
		v, err := client.Query(ctx, expr, time.Now())
		return len(v), err
	}
	// increase() sees nothing of a counter's first value: once Prometheus has the series, refuse
	// and dead-letter once more, as a running system would.
	for _, expr := range []string{`scoreflow_writer_items_total{outcome="Failed"}`, `scoreflow_dead_letters_total`} {
		if n, err := eventually(func() (int, error) { return nonEmpty(expr) }); n == 0 {
			t.Fatalf("%s not scraped: %v", expr, err)
		}
	}
	bad.SetID("bad-2")
	if status, _ := functest.Send(t, writer.url, bad); status != http.StatusUnprocessableEntity {
		t.Fatalf("score-writer answered the second out-of-range score %d", status)
	}
	if status, _ := functest.Send(t, deadLetter.url, bad); status != http.StatusAccepted {
		t.Fatalf("dead-letter answered %d", status)
	}
	for _, q := range panelQueries(t) {
		if strings.Contains(q.expr, knativeMetric) {
			continue
		}
		n, err := eventually(func() (int, error) { return nonEmpty(q.expr) })
		if err != nil || n == 0 {
			t.Errorf("%s: %d series, err %v\n  %s", q.name, n, err, q.expr)
		}
	}
	for _, q := range ruleQueries(t) {
		expr, err := parser.ParseExpr(q.expr)
		if err != nil {
			t.Errorf("%s: %v", q.name, err)
			continue
		}
		// An alert's condition holds only when something is wrong; what every rule must have is
		// the metrics it reads.
		for _, sel := range parser.ExtractSelectors(expr) {
			for _, m := range sel {
				if m.Name != model.MetricNameLabel {
					continue
				}
				n, err := eventually(func() (int, error) { return nonEmpty(m.Value) })
				if err != nil || n == 0 {
					t.Errorf("%s reads %s, which the functions do not export (%d series, err %v)", q.name, m.Value, n, err)
				}
			}
		}
	}
	wantActive := map[string]bool{"ScoreflowWriterRefusals": true, "ScoreflowDeadLetters": true, "ScoreflowScoresStale": false, "ScoreflowWriterHubErrors": false}
	var got map[string]ruleState
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		got = alertRules(t, prom.URL)
		done := true
		for name, active := range wantActive {
			if got[name].active != active || got[name].health != "ok" {
				done = false
			}
		}
		if done || time.Now().After(deadline) {
			break
		}
	}
	for name, active := range wantActive {
		if s, ok := got[name]; !ok || s.health != "ok" || s.active != active {
			t.Errorf("alert %s: %+v (present %v), want health ok and active %v", name, s, ok, active)
		}
	}
	if t.Failed() {
		t.Logf("prometheus output:\n%s", prom.Output())
	}
}

type ruleState struct {
	health, lastError string
	active            bool
}

// alertRules reads the alerting rules' state from Prometheus's /api/v1/rules.
func alertRules(t *testing.T, url string) map[string]ruleState {
	t.Helper()
	resp, err := http.Get(url + "/api/v1/rules?type=alert")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
					State     string `json:"state"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	out := map[string]ruleState{}
	for _, g := range body.Data.Groups {
		for _, r := range g.Rules {
			out[r.Name] = ruleState{health: r.Health, lastError: r.LastError, active: r.State == "firing" || r.State == "pending"}
		}
	}
	return out
}

// eventually retries f for up to 20s until it finds series.
func eventually(f func() (int, error)) (int, error) {
	var n int
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if n, err = f(); err == nil && n > 0 {
			return n, nil
		}
	}
	return n, err
}

type function struct{ name, url string }

// startFunction builds functions/<name> and runs it on a free loopback port with env, as Knative
// runs its image (PORT), until the test ends; it waits for /readyz.
func startFunction(t *testing.T, dir, name string, env ...string) *function {
	t.Helper()
	return startFunctionOn(t, dir, name, "127.0.0.1", env...)
}

// startFunctionOn is startFunction listening on host's address instead of the loopback one.
func startFunctionOn(t *testing.T, dir, name, host string, env ...string) *function {
	t.Helper()
	bin := filepath.Join(dir, name)
	if out, err := exec.Command("go", "build", "-o", bin, "../functions/"+name).CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", name, err, out)
	}
	port, err := proc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	f := &function{name: name, url: fmt.Sprintf("http://%s:%d", host, port)}
	out := &proc.Buffer{}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), append([]string{"ADDRESS=" + host, fmt.Sprintf("PORT=%d", port)}, env...)...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = proc.DieWithParent()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, out.String())
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(f.url + "/readyz"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return f
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready within 30s:\n%s", name, out.String())
		}
	}
}
