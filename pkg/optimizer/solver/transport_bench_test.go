package solver

import (
	"context"
	"math/rand/v2"
	"testing"
)

// BenchmarkAssign50x5x200 is the fixed-policy assignment alone, on the greedy's policies.
func BenchmarkAssign50x5x200(b *testing.B) {
	m, err := build(bench(rand.New(rand.NewPCG(50, 200)), 50, 5, 200))
	if err != nil {
		b.Fatal(err)
	}
	pol, cl, ok := m.greedy(nil)
	if !ok {
		pol, cl, ok = m.greedy(m.roomiest())
	}
	if !ok {
		b.Fatal("no greedy plan")
	}
	v, _ := m.value(pol, cl)
	var av float64
	for b.Loop() {
		acl, ok := m.assign(context.Background(), pol, nil)
		if !ok {
			b.Fatal("assign found no plan")
		}
		av, _ = m.value(pol, acl)
	}
	_, _, iv := m.improve(context.Background(), pol, cl, v)
	b.ReportMetric(v, "greedy")
	b.ReportMetric(iv, "improved")
	b.ReportMetric(av, "assigned")
}
