package function_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/function"
)

// A sender presents the token a SinkBinding mounts, read afresh for every event (Knative rotates
// it in place), and sends without one when there is no file.
func TestSenderPresentsTheMountedToken(t *testing.T) {
	got := make(chan string, 4)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
		w.WriteHeader(http.StatusAccepted)
	}))
	defer sink.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	s, err := function.NewSenderWithToken(sink.URL, "", tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ token, want string }{{"", ""}, {"first\n", "Bearer first"}, {"rotated", "Bearer rotated"}} {
		if c.token != "" {
			if err := os.WriteFile(tokenFile, []byte(c.token), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Send(context.Background(), functest.Ping(`{}`)); err != nil {
			t.Fatal(err)
		}
		if h := <-got; h != c.want {
			t.Errorf("token file %q: Authorization %q, want %q", c.token, h, c.want)
		}
	}
}

// An agent outside the hub points --sink-token-file (SINK_TOKEN_FILE) at a hub-issued token
// mounted from a Secret. When the Secret is renewed the kubelet swaps the file in place; the next
// event presents the renewed token, with no restart.
func TestSinkTokenFileFlag(t *testing.T) {
	got := make(chan string, 2)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
		w.WriteHeader(http.StatusAccepted)
	}))
	defer sink.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("hub-issued"), 0o600); err != nil {
		t.Fatal(err)
	}
	fn := function.New("agent", "test")
	newSender := fn.SinkFlags()
	t.Setenv("SINK_TOKEN_FILE", tokenFile)
	if err := fn.Parse([]string{"--sink", sink.URL}); err != nil {
		t.Fatal(err)
	}
	s, err := newSender()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(context.Background(), functest.Ping(`{}`)); err != nil {
		t.Fatal(err)
	}
	if h := <-got; h != "Bearer hub-issued" {
		t.Fatalf("Authorization %q", h)
	}
	renewed := filepath.Join(filepath.Dir(tokenFile), "..renewed")
	if err := os.WriteFile(renewed, []byte("hub-issued-renewed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(renewed, tokenFile); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(context.Background(), functest.Ping(`{}`)); err != nil {
		t.Fatal(err)
	}
	if h := <-got; h != "Bearer hub-issued-renewed" {
		t.Fatalf("after the token file was renewed: Authorization %q", h)
	}
}

// The token a sender presents is for its sink: a redirect to another host (or port) is followed
// without it, one on the sink's own origin keeps it.
func TestSenderTokenStaysWithTheSinksOrigin(t *testing.T) {
	elsewhere := make(chan string, 2)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere <- r.Header.Get("Authorization")
		w.WriteHeader(http.StatusAccepted)
	}))
	defer other.Close()
	here := make(chan string, 2)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, other.URL+"/collect", http.StatusTemporaryRedirect)
		case "/moved":
			http.Redirect(w, r, "/ingress", http.StatusTemporaryRedirect)
		default:
			here <- r.Header.Get("Authorization")
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	defer sink.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("for-the-sink"), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, got := range map[string]chan string{"/away": elsewhere, "/moved": here} {
		s, err := function.NewSenderWithToken(sink.URL+path, "", tokenFile)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(context.Background(), functest.Ping(`{}`)); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		h := <-got
		switch {
		case path == "/away" && h != "":
			t.Errorf("redirected to another origin, the request carried Authorization %q", h)
		case path == "/moved" && h != "Bearer for-the-sink":
			t.Errorf("redirected on the sink's origin, Authorization %q, want the token", h)
		}
	}
}
