package mcpserver_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/scoreflow/scoreflow/pkg/mcpserver"
)

// boundedServer serves /mcp with the static read and optimize tokens and the given session
// bounds. The hub is not needed: opening a session calls no tool.
func boundedServer(t *testing.T, idle time.Duration, total, perCaller int) string {
	t.Helper()
	dir := t.TempDir()
	write := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcpserver.Handler(mcpserver.Config{ReadTokenFile: write("read", readToken), OptimizeTokenFile: write("optimize", adminToken),
		Namespaces: []string{ns}, SessionIdleTimeout: idle, MaxSessions: total, MaxSessionsPerCaller: perCaller,
		Log: slog.New(slog.NewJSONHandler(io.Discard, nil))}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}

// initialize posts an MCP initialize without a session, as a client opening one does, and returns
// the status and body (the session id in the response header is left unused: never closed).
func initialize(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"leaky","version":"v1"}}}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK && resp.Header.Get("Mcp-Session-Id") == "" {
		t.Fatalf("initialize answered 200 without a session id: %s", body)
	}
	return resp.StatusCode, string(body)
}

// A reader that opens sessions and never closes them gets at most its own share: beyond its cap
// 429 naming the bound, while another caller still opens sessions, up to the server's cap (503
// beyond). Sessions idle past the timeout are closed, and their slots come back.
func TestSessionsAreBoundedPerCallerAndInAll(t *testing.T) {
	const idle = time.Second
	url := boundedServer(t, idle, 6, 4)
	for i := range 4 {
		if st, body := initialize(t, url, readToken); st != http.StatusOK {
			t.Fatalf("the reader's session %d: %d %s", i+1, st, body)
		}
	}
	st, body := initialize(t, url, readToken)
	if st != http.StatusTooManyRequests || !strings.Contains(body, "TooManySessions: read-token has 4 sessions open, the most one caller may") {
		t.Errorf("the reader's 5th session: %d %q, want 429 TooManySessions", st, body)
	}
	// The planner is not locked out by the reader: its own two sessions fill the server.
	for i := range 2 {
		if st, body := initialize(t, url, adminToken); st != http.StatusOK {
			t.Fatalf("the planner's session %d beside the reader's: %d %s", i+1, st, body)
		}
	}
	if st, body := initialize(t, url, adminToken); st != http.StatusServiceUnavailable || !strings.Contains(body, "Busy: 6 sessions open") {
		t.Errorf("a 7th session: %d %q, want 503 Busy", st, body)
	}

	// A session in use stays open past the idle timeout; the idle ones close.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	deadline := time.Now().Add(10 * idle)
	var active *mcp.ClientSession
	for active == nil && time.Now().Before(deadline) {
		cs, err := connect(ctx, url, adminToken)
		if err == nil {
			active = cs
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if active == nil {
		t.Fatalf("no session could be opened %s after the others went idle", 10*idle)
	}
	defer active.Close()
	for range 3 {
		time.Sleep(idle / 2)
		if _, err := active.ListTools(ctx, nil); err != nil {
			t.Fatalf("a session in use was closed: %v", err)
		}
	}
	// Every slot of the reader came back.
	for i := range 4 {
		if st, body := initialize(t, url, readToken); st != http.StatusOK {
			t.Fatalf("the reader's session %d after its idle ones closed: %d %s", i+1, st, body)
		}
	}
}

// A session the client ends (DELETE) gives its slot back at once.
func TestClosedSessionsFreeTheirSlot(t *testing.T) {
	url := boundedServer(t, time.Hour, 10, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 3 {
		cs, err := connect(ctx, url, readToken)
		if err != nil {
			t.Fatalf("session %d, the previous one closed: %v", i+1, err)
		}
		if st, body := initialize(t, url, readToken); st != http.StatusTooManyRequests {
			t.Errorf("a second session beside an open one: %d %q, want 429", st, body)
		}
		if err := cs.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
