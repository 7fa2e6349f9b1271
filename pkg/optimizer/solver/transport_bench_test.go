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
	var acl []int
	for b.Loop() {
		if acl, ok = m.assign(context.Background(), pol, nil); !ok {
			b.Fatal("assign found no plan")
		}
	}
	ip, ic, _ := m.improve(context.Background(), pol, cl, v)
	b.ReportMetric(m.objective(cl, pol), "greedy")
	b.ReportMetric(m.objective(ic, ip), "improved")
	b.ReportMetric(m.objective(acl, pol), "assigned")
}
