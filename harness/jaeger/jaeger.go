// Package jaeger runs Jaeger's all-in-one (`make tools` builds it from its Go module) on loopback
// ports: an OTLP/HTTP receiver for the spans of Knative's data plane and scoreflow's functions, an
// in-memory trace store, and the query API and UI that read a trace back. `scoreflow run
// --tracing` and the end-to-end tests use it.
package jaeger

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"time"

	"github.com/scoreflow/scoreflow/harness/proc"
	"github.com/scoreflow/scoreflow/tools"
)

// Jaeger is a running all-in-one.
type Jaeger struct {
	// OTLPEndpoint takes OTLP over HTTP (protobuf): what Knative's tracing-endpoint and the
	// functions' --tracing-endpoint name.
	OTLPEndpoint string
	// UIURL serves the UI and, under /api, the query API.
	UIURL string

	p   *proc.Process
	out *proc.Buffer
}

// Start runs Jaeger with every listener on a free loopback port, keeping at most maxTraces traces
// in memory, and waits until its query API answers.
func Start(maxTraces int) (*Jaeger, error) {
	bin, err := tools.Path(tools.Jaeger)
	if err != nil {
		return nil, err
	}
	var lastErr error
	// A port found free can be taken before Jaeger binds it: try a few times.
	for range 3 {
		j, err := start(bin, maxTraces)
		if err == nil {
			return j, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func start(bin string, maxTraces int) (*Jaeger, error) {
	flags := map[string]string{}
	for _, f := range []string{"collector.otlp.http", "collector.otlp.grpc", "collector.http-server", "collector.grpc-server",
		"query.http-server", "query.grpc-server", "admin.http"} {
		port, err := proc.FreePort()
		if err != nil {
			return nil, err
		}
		flags[f] = net.JoinHostPort("127.0.0.1", fmt.Sprint(port))
	}
	args := []string{fmt.Sprintf("--memory.max-traces=%d", maxTraces), "--log-level=warn"}
	for f, addr := range flags {
		args = append(args, "--"+f+".host-port="+addr)
	}
	out := &proc.Buffer{}
	p, err := proc.Start(proc.Spec{Name: "jaeger", Path: bin, Args: args, Out: out,
		// The all-in-one keeps spans in memory unless told otherwise, and would report its own.
		Env: []string{"SPAN_STORAGE_TYPE=memory", "OTEL_TRACES_EXPORTER=none"}})
	if err != nil {
		return nil, err
	}
	j := &Jaeger{OTLPEndpoint: "http://" + flags["collector.otlp.http"] + "/v1/traces", UIURL: "http://" + flags["query.http-server"], p: p, out: out}
	if err := j.waitReady(60 * time.Second); err != nil {
		p.Stop(5 * time.Second)
		return nil, fmt.Errorf("%w\njaeger output:\n%s", err, out.String())
	}
	if err := p.WaitPort(flags["collector.otlp.http"], 10*time.Second); err != nil {
		p.Stop(5 * time.Second)
		return nil, fmt.Errorf("%w\njaeger output:\n%s", err, out.String())
	}
	return j, nil
}

func (j *Jaeger) waitReady(timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if exited, err := j.p.Exited(); exited {
			return fmt.Errorf("jaeger exited: %v", err)
		}
		resp, err := client.Get(j.UIURL + "/api/services")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	return fmt.Errorf("jaeger's query API not ready at %s after %s", j.UIURL, timeout)
}

// Stop stops Jaeger; its traces are gone.
func (j *Jaeger) Stop() { j.p.Stop(5 * time.Second) }

// Output is what Jaeger has logged.
func (j *Jaeger) Output() string { return j.out.String() }

// TraceURL is where the UI shows a trace.
func (j *Jaeger) TraceURL(traceID string) string {
	return j.UIURL + "/trace/" + url.PathEscape(traceID)
}

// Span is one span of a trace as the query API returns it.
type Span struct {
	Service, Name    string
	SpanID, ParentID string // ParentID: the CHILD_OF reference, empty for the root
	Start            time.Time
	Duration         time.Duration
	Tags             map[string]any
}

// End is when the span ended.
func (s Span) End() time.Time { return s.Start.Add(s.Duration) }

// Trace returns the spans Jaeger holds of traceID (32 hex digits), by start time; none (and no
// error) while it holds none.
func (j *Jaeger) Trace(ctx context.Context, traceID string) ([]Span, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.UIURL+"/api/traces/"+url.PathEscape(traceID), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /api/traces/%s: %d %s", traceID, resp.StatusCode, body)
	}
	var doc struct {
		Data []struct {
			Spans []struct {
				SpanID        string `json:"spanID"`
				OperationName string `json:"operationName"`
				References    []struct {
					RefType string `json:"refType"`
					SpanID  string `json:"spanID"`
				} `json:"references"`
				StartTime int64  `json:"startTime"` // µs since the epoch
				Duration  int64  `json:"duration"`  // µs
				ProcessID string `json:"processID"`
				Tags      []struct {
					Key   string `json:"key"`
					Value any    `json:"value"`
				} `json:"tags"`
			} `json:"spans"`
			Processes map[string]struct {
				ServiceName string `json:"serviceName"`
			} `json:"processes"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("GET /api/traces/%s: %w", traceID, err)
	}
	var out []Span
	for _, t := range doc.Data {
		for _, s := range t.Spans {
			sp := Span{Service: t.Processes[s.ProcessID].ServiceName, Name: s.OperationName, SpanID: s.SpanID,
				Start: time.UnixMicro(s.StartTime), Duration: time.Duration(s.Duration) * time.Microsecond, Tags: map[string]any{}}
			for _, r := range s.References {
				if r.RefType == "CHILD_OF" {
					sp.ParentID = r.SpanID
				}
			}
			for _, tag := range s.Tags {
				sp.Tags[tag.Key] = tag.Value
			}
			out = append(out, sp)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Start.Before(out[b].Start) })
	return out, nil
}
