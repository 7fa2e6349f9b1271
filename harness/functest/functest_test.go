package functest

import (
	"net/http"
	"testing"
)

// A Sink keeps what it accepts; what it refuses is only counted, as a broker that is down would.
func TestSinkAcceptsAndRefuses(t *testing.T) {
	s := NewSink(t, nil)
	if code, reply := Send(t, s.URL, Ping(`{"n":1}`)); code != http.StatusAccepted || reply != nil {
		t.Fatalf("accepting: status %d reply %v, want 202 and no reply", code, reply)
	}
	s.Answer(http.StatusServiceUnavailable)
	if code, _ := Send(t, s.URL, Ping(`{"n":2}`)); code != http.StatusServiceUnavailable {
		t.Fatalf("refusing: status %d, want 503", code)
	}
	s.Answer(0)
	third := Ping(`{"n":3}`)
	Send(t, s.URL, third)
	if got := s.Take(); len(got) != 2 || got[1].ID() != third.ID() {
		t.Errorf("took %d events, want the 2 accepted ones", len(got))
	}
	if got := s.Take(); len(got) != 0 {
		t.Errorf("took %d events again, want none", len(got))
	}
	if n := s.Attempts(); n != 3 {
		t.Errorf("%d attempts, want 3", n)
	}
	if e := <-s.Arrived(); string(e.Data()) != `{"n":1}` {
		t.Errorf("first arrival %s, want the first event", e.Data())
	}
}
