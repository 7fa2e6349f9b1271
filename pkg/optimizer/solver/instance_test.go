package solver

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// instance is a placement problem as raw data, the format of testdata/*.json: the oracle (CBC)
// reads it through an LP file written from these fields alone, the solver through toProblem.
type instance struct {
	Name      string             `json:"name,omitempty"`
	Origin    string             `json:"origin,omitempty"`
	Minimize  bool               `json:"minimize"`
	Clusters  []instanceCluster  `json:"clusters"`
	Workloads []instanceWorkload `json:"workloads"`
	// Scores: [w, c, p, score] for every option that has a score.
	Scores [][4]float64 `json:"scores"`
}

type instanceCluster struct {
	Name     string           `json:"name"`
	Policies []instancePolicy `json:"policies"`
}

type instancePolicy struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"`
	Supply int64  `json:"supply"`
	Device string `json:"device"`
}

type instanceWorkload struct {
	Name   string `json:"name"`
	App    string `json:"app"`
	Kind   string `json:"kind"`
	Demand int64  `json:"demand"`
}

func loadInstance(t testing.TB, name string) *instance {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	in := &instance{}
	if err := json.Unmarshal(b, in); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return in
}

// problem is the instance as the solver's input.
func (in *instance) problem() Problem {
	pr := Problem{Minimize: in.Minimize}
	for _, c := range in.Clusters {
		cl := Cluster{Name: c.Name}
		for _, p := range c.Policies {
			cl.Policies = append(cl.Policies, Policy{Name: p.Name, Kind: p.Kind, Supply: p.Supply, Device: p.Device})
		}
		pr.Clusters = append(pr.Clusters, cl)
	}
	for _, w := range in.Workloads {
		pr.Workloads = append(pr.Workloads, Workload{Name: w.Name, App: w.App, Kind: w.Kind, Demand: w.Demand})
	}
	scores := map[[3]int]float64{}
	for _, s := range in.Scores {
		scores[[3]int{int(s[0]), int(s[1]), int(s[2])}] = s[3]
	}
	pr.Score = func(w, c, p int) (float64, bool) {
		v, ok := scores[[3]int{w, c, p}]
		return v, ok
	}
	return pr
}

func (in *instance) String() string {
	return fmt.Sprintf("%s (%d×%d×%d)", in.Name, len(in.Clusters), len(in.Clusters[0].Policies), len(in.Workloads))
}
