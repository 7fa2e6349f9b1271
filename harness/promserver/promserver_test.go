package promserver

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

func TestPushAndStop(t *testing.T) {
	s, err := Run()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	at := Aligned(time.Minute)
	ctx := context.Background()
	ok := Grid(map[string]string{"__name__": "m", "z": "1", "a": "2"}, at, time.Minute, 1, 2)
	if err := s.Push(ctx, ok); err != nil {
		t.Fatalf("valid series: %v", err)
	}
	tests := []struct {
		name   string
		series Series
		quote  string
	}{
		{"no name", Gauge(map[string]string{"a": "1"}, at, 1), "no __name__"},
		{"out of order", Series{Labels: map[string]string{"__name__": "m"}, Samples: []Sample{{at, 1}, {at.Add(-time.Minute), 2}}}, "not in time order"},
		// The server itself refuses samples far older than the head: Push must report it.
		{"too old for the head", Gauge(map[string]string{"__name__": "old"}, at.Add(-3*time.Hour), 1), "HTTP 400"},
	}
	for _, tt := range tests {
		if err := s.Push(ctx, tt.series); err == nil || !strings.Contains(err.Error(), tt.quote) {
			t.Errorf("%s: Push = %v, want an error with %q", tt.name, err, tt.quote)
		}
	}
	s.Stop()
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Errorf("data directory %s still there after Stop: %v", s.dir, err)
	}
	if err := s.Push(ctx, ok); err == nil {
		t.Error("Push to a stopped server succeeded")
	}
	s.Stop() // twice is fine
}
