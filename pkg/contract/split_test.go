package contract

import (
	"fmt"
	"testing"
	"time"
)

// fleet is a score.updated for n clusters with m scores each of 20-character names.
func fleet(n, m int) ScoreUpdated {
	s := ScoreUpdated{Resource: "fleet"}
	for i := range n {
		it := ClusterScores{Cluster: fmt.Sprintf("cluster-%05d", i)}
		for j := range m {
			it.Scores = append(it.Scores, Score{Name: fmt.Sprintf("score-name-%09d", j), Value: float64(i%201 - 100)})
		}
		s.Items = append(s.Items, it)
	}
	return s
}

// Each event NewScoreUpdates builds decodes and validates as the writer decodes it, stays within
// the contract's bounds, and together they carry every item exactly once, in order.
func TestNewScoreUpdatesSplitsWithinTheContract(t *testing.T) {
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		s         ScoreUpdated
		minEvents int
	}{
		{"fits one event", fleet(100, 3), 1},
		{"more clusters than MaxItems", fleet(MaxItems+1, 1), 2},
		{"10,000 clusters over MaxEventBytes", fleet(10000, 40), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs, err := NewScoreUpdates("scoreflow/test", at, tc.s)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) < tc.minEvents || (tc.minEvents == 1) != (len(evs) == 1) {
				t.Fatalf("%d events, want %d or more (and one only when it fits)", len(evs), tc.minEvents)
			}
			next := 0
			ids := map[string]bool{}
			for k, e := range evs {
				if n := len(e.Data()); n > MaxScoreUpdatedDataBytes {
					t.Errorf("event %d: %d bytes of data, more than %d", k, n, MaxScoreUpdatedDataBytes)
				}
				got, err := DecodeScoreUpdated(&e)
				if err != nil {
					t.Fatalf("event %d does not decode: %v", k, err)
				}
				if err := got.Validate(); err != nil {
					t.Fatalf("event %d is invalid: %v", k, err)
				}
				if !e.Time().Equal(at) || got.Resource != tc.s.Resource || e.Extensions()[ExtResource] != tc.s.Resource || ids[e.ID()] {
					t.Errorf("event %d: time %v, resource %q (extension %v), id %q (repeated: %v)", k, e.Time(), got.Resource, e.Extensions()[ExtResource], e.ID(), ids[e.ID()])
				}
				ids[e.ID()] = true
				for _, it := range got.Items {
					if next >= len(tc.s.Items) || it.Cluster != tc.s.Items[next].Cluster || len(it.Scores) != len(tc.s.Items[next].Scores) {
						t.Fatalf("event %d: item %s where items[%d] was expected", k, it.Cluster, next)
					}
					next++
				}
			}
			if next != len(tc.s.Items) {
				t.Errorf("the events carry %d items of %d", next, len(tc.s.Items))
			}
		})
	}
}

// A cluster named twice is refused even when its two items would land in different events.
func TestNewScoreUpdatesRefusesAClusterTwice(t *testing.T) {
	s := fleet(MaxItems+1, 1)
	s.Items[MaxItems].Cluster = s.Items[0].Cluster
	if _, err := NewScoreUpdates("scoreflow/test", time.Now(), s); err == nil {
		t.Fatal("a cluster in items[0] and items[10000] was accepted")
	}
}

// A smaller cap splits by it: 250 clusters at 40 per event are 7 events, the last with 10, and
// together every cluster once, in order; 0 keeps the contract's bound.
func TestSplitScoreUpdatesByMaxItems(t *testing.T) {
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	s := fleet(250, 1)
	evs, err := SplitScoreUpdates("scoreflow/test", at, s, 40)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 7 {
		t.Fatalf("%d events, want 7", len(evs))
	}
	next := 0
	for k, e := range evs {
		got, err := DecodeScoreUpdated(&e)
		if err != nil {
			t.Fatal(err)
		}
		if want := min(40, 250-40*k); len(got.Items) != want {
			t.Errorf("event %d: %d items, want %d", k, len(got.Items), want)
		}
		for _, it := range got.Items {
			if it.Cluster != s.Items[next].Cluster {
				t.Fatalf("event %d: %s where %s was next", k, it.Cluster, s.Items[next].Cluster)
			}
			next++
		}
	}
	if evs, err := SplitScoreUpdates("scoreflow/test", at, s, 0); err != nil || len(evs) != 1 {
		t.Errorf("cap 0: %d events (%v), want 1", len(evs), err)
	}
}
