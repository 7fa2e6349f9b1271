package function

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"

	"k8s.io/klog/v2"
)

// TestLibraryLogsAreStructured: client-go's logs (leader election, informers) come out as the
// function's own JSON records, not klog's text lines.
func TestLibraryLogsAreStructured(t *testing.T) {
	var buf bytes.Buffer
	f := New("logs", "test")
	f.Log = slog.New(slog.NewJSONHandler(&buf, nil)).With("function", "logs")
	f.routeLibraryLogs()
	t.Cleanup(func() { klog.ClearLogger() })
	klog.InfoS("successfully acquired lease", "lease", "scoreflow/x")
	klog.Flush()
	var rec map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(buf.Bytes()), &rec); err != nil {
		t.Fatalf("klog's line is not one JSON record: %q: %v", buf.String(), err)
	}
	if rec["msg"] != "successfully acquired lease" || rec["function"] != "logs" || rec["lease"] != "scoreflow/x" || rec["logger"] != "client-go" {
		t.Errorf("record %v, want the message, the function, the lease and logger client-go", rec)
	}
}
