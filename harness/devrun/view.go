package devrun

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Scores is every AddOnPlacementScore on a hub: cluster -> "resource/score" -> value, and whether
// the object's validUntil has passed (Placements then count its scores as 0).
type Scores struct {
	Values  map[string]map[string]int32
	Expired map[string]bool // "cluster/resource"
	Columns []string
}

// ReadScores lists every AddOnPlacementScore.
func ReadScores(ctx context.Context, c clusterclient.Interface) (*Scores, error) {
	list, err := c.ClusterV1alpha1().AddOnPlacementScores(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	s := &Scores{Values: map[string]map[string]int32{}, Expired: map[string]bool{}}
	cols := map[string]bool{}
	for _, o := range list.Items {
		row := s.Values[o.Namespace]
		if row == nil {
			row = map[string]int32{}
			s.Values[o.Namespace] = row
		}
		for _, sc := range o.Status.Scores {
			col := o.Name + "/" + sc.Name
			row[col] = sc.Value
			cols[col] = true
		}
		if vu := o.Status.ValidUntil; vu != nil && vu.Time.Before(time.Now()) {
			s.Expired[o.Namespace+"/"+o.Name] = true
		}
	}
	for c := range cols {
		s.Columns = append(s.Columns, c)
	}
	sort.Strings(s.Columns)
	return s, nil
}

// Write prints the scores as a table, one row per cluster. An expired value is marked with *.
func (s *Scores) Write(w io.Writer) {
	if len(s.Values) == 0 {
		fmt.Fprintln(w, "no AddOnPlacementScores yet")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\t"+strings.Join(s.Columns, "\t"))
	clusters := make([]string, 0, len(s.Values))
	for c := range s.Values {
		clusters = append(clusters, c)
	}
	sort.Strings(clusters)
	for _, c := range clusters {
		cells := []string{c}
		for _, col := range s.Columns {
			v, ok := s.Values[c][col]
			switch {
			case !ok:
				cells = append(cells, "-")
			case s.Expired[c+"/"+strings.SplitN(col, "/", 2)[0]]:
				cells = append(cells, fmt.Sprintf("%d*", v))
			default:
				cells = append(cells, fmt.Sprint(v))
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	_ = tw.Flush()
}

// Decision is the clusters a Placement has chosen, from its PlacementDecisions.
func Decision(ctx context.Context, c clusterclient.Interface, namespace, placement string) ([]string, error) {
	list, err := c.ClusterV1beta1().PlacementDecisions(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: clusterv1beta1.PlacementLabel + "=" + placement,
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range list.Items {
		for _, cd := range d.Status.Decisions {
			out = append(out, cd.ClusterName)
		}
	}
	sort.Strings(out)
	return out, nil
}

// EventLine renders an event the broker delivered (to cloudevents-player's Trigger, which takes
// everything) for a live log: its type and source, and for a failure why it failed.
func EventLine(e event.Event) string {
	ts := e.Time()
	if ts.IsZero() {
		ts = time.Now()
	}
	line := fmt.Sprintf("%s  %-34s from %s", ts.Local().Format("15:04:05.000"), e.Type(), e.Source())
	if why := failureSummary(e.Type(), e.Data()); why != "" {
		line += ": " + why
	}
	return line
}

// failureSummary says why a write.failed or score.failed failed: the reason, and for a writer's
// answer the clusters refused (the first few) with their reasons. Empty for other events.
func failureSummary(typ string, data []byte) string {
	const shown, msgLen = 3, 120
	switch typ {
	case contract.TypeScoreFailed:
		var f contract.Failure
		if json.Unmarshal(data, &f) != nil {
			return ""
		}
		return fmt.Sprintf("%s: %s", f.Reason, contract.Truncate(f.Message, msgLen))
	case contract.TypeWriteFailed:
		var r contract.WriteResult
		if json.Unmarshal(data, &r) != nil {
			return ""
		}
		var parts []string
		if r.Reason != "" {
			parts = append(parts, fmt.Sprintf("%s: %s", r.Reason, contract.Truncate(r.Message, msgLen)))
		}
		failed := 0
		for _, it := range r.Items {
			if it.Outcome != contract.OutcomeFailed {
				continue
			}
			if failed++; failed <= shown {
				parts = append(parts, fmt.Sprintf("cluster %s %s: %s", it.Cluster, it.Reason, contract.Truncate(it.Message, msgLen)))
			}
		}
		if failed > shown {
			parts = append(parts, fmt.Sprintf("and %d more clusters", failed-shown))
		}
		return strings.Join(parts, "; ")
	}
	return ""
}
