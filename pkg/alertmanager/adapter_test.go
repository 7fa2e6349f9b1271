package alertmanager

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
)

type received struct {
	id, source, typ, ext string
	time                 time.Time
	data                 *contract.MetricChanged
}

// take returns the events a sink standing in for a broker accepted since the last take.
func take(s *functest.Sink) []received {
	var out []received
	for _, e := range s.Take() {
		m, _ := contract.DecodeMetricChanged(&e) // the sink checked it
		ext, _ := e.Extensions()["sinkbinding"].(string)
		out = append(out, received{e.ID(), e.Source(), e.Type(), ext, e.Time(), m})
	}
	return out
}

var (
	now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	t0  = time.Date(2026, 3, 1, 11, 50, 0, 0, time.UTC)
	t1  = time.Date(2026, 3, 1, 11, 55, 30, 0, time.UTC)
)

const overrides = `{"extensions":{"sinkbinding":"metric-sources"}}`

// adapter serves an Adapter over HTTP, sending to sinkURL through a real Sink.
func adapter(t *testing.T, m Mapping, sinkURL string, timeout time.Duration) (*Adapter, string) {
	t.Helper()
	return adapterWith(t, Options{Mapping: m, SendTimeout: timeout}, sinkURL)
}

// adapterWith is adapter with more options.
func adapterWith(t *testing.T, opts Options, sinkURL string) (*Adapter, string) {
	t.Helper()
	snd, err := function.NewSender(sinkURL, overrides)
	if err != nil {
		t.Fatal(err)
	}
	opts.Source, opts.Now = "scoreflow/alertmanager-adapter", func() time.Time { return now }
	a, err := New(opts, snd, slog.New(slog.NewTextHandler(t.Output(), nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	return a, srv.URL
}

func post(t *testing.T, url, body string) (int, Answer) {
	t.Helper()
	resp, err := http.Post(url+"/", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var ans Answer
	if err := json.Unmarshal(b, &ans); err != nil {
		t.Fatalf("answer %q is not JSON: %v", b, err)
	}
	return resp.StatusCode, ans
}

// alert renders one alert as Alertmanager does; a zero end is Go's zero time, as Alertmanager sends it.
func alert(status string, labels map[string]string, start, end time.Time) Alert {
	return Alert{Status: status, Labels: labels, Annotations: map[string]string{"summary": "s"}, StartsAt: start, EndsAt: end,
		GeneratorURL: "http://prometheus:9090/graph", Fingerprint: fmt.Sprintf("%016x", len(labels))}
}

func payload(alerts ...Alert) string {
	p := Payload{Version: "4", GroupKey: `{}:{alertname="x"}`, Status: StatusFiring, Receiver: "scoreflow",
		GroupLabels: map[string]string{}, CommonLabels: map[string]string{}, CommonAnnotations: map[string]string{},
		ExternalURL: "http://alertmanager:9093", Alerts: alerts}
	b, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestWebhook(t *testing.T) {
	byPrefix := Mapping{ClusterLabel: "cluster", MetricPrefix: "alert_"}
	tests := []struct {
		name    string
		mapping Mapping
		body    string
		status  int
		want    []contract.Sample // nil: no event reaches the sink
		skipped int
		errHas  string
	}{
		{
			name: "firing", mapping: byPrefix, status: 200,
			body: payload(alert("firing", map[string]string{"alertname": "HighCPU", "cluster": "c1", "severity": "warning"}, t0, time.Time{})),
			want: []contract.Sample{{Metric: "alert_HighCPU", Cluster: "c1", Labels: map[string]string{"alertname": "HighCPU", "severity": "warning"}, Value: 1, ObservedAt: now}},
		},
		{
			name: "resolved", mapping: byPrefix, status: 200,
			body: payload(alert("resolved", map[string]string{"alertname": "HighCPU", "cluster": "c1"}, t0, t1)),
			want: []contract.Sample{{Metric: "alert_HighCPU", Cluster: "c1", Labels: map[string]string{"alertname": "HighCPU"}, Value: 0, ObservedAt: now}},
		},
		{
			name: "mixed, in payload order, one without cluster", mapping: byPrefix, status: 200, skipped: 1,
			body: payload(
				alert("resolved", map[string]string{"alertname": "Disk-Full.v2", "cluster": "c2"}, t0, t1),
				alert("firing", map[string]string{"alertname": "Watchdog"}, t0, time.Time{}),
				alert("firing", map[string]string{"alertname": "HighCPU", "cluster": "c1"}, t1, time.Time{}),
			),
			want: []contract.Sample{
				{Metric: "alert_Disk_Full_v2", Cluster: "c2", Labels: map[string]string{"alertname": "Disk-Full.v2"}, Value: 0, ObservedAt: now},
				{Metric: "alert_HighCPU", Cluster: "c1", Labels: map[string]string{"alertname": "HighCPU"}, Value: 1, ObservedAt: now},
			},
		},
		{
			name: "no cluster label anywhere: nothing to send", mapping: byPrefix, status: 200, skipped: 2,
			body: payload(
				alert("firing", map[string]string{"alertname": "Watchdog"}, t0, time.Time{}),
				alert("firing", map[string]string{"alertname": "HighCPU", "cluster": ""}, t0, time.Time{}),
			),
		},
		{
			name: "cluster label configured elsewhere", mapping: Mapping{ClusterLabel: "managed_cluster", MetricPrefix: "alert_"}, status: 200, skipped: 1,
			body: payload(
				alert("firing", map[string]string{"alertname": "HighCPU", "managed_cluster": "c3", "cluster": "hub"}, t0, time.Time{}),
				alert("firing", map[string]string{"alertname": "HighCPU", "cluster": "c1"}, t0, time.Time{}),
			),
			want: []contract.Sample{{Metric: "alert_HighCPU", Cluster: "c3", Labels: map[string]string{"alertname": "HighCPU", "cluster": "hub"}, Value: 1, ObservedAt: now}},
		},
		{
			name: "invalid label names dropped", mapping: byPrefix, status: 200,
			body: payload(alert("firing", map[string]string{"alertname": "HighCPU", "cluster": "c1", "team-name": "x", "1st": "y", "ok_name": "z", "": "e"}, t0, time.Time{})),
			want: []contract.Sample{{Metric: "alert_HighCPU", Cluster: "c1", Labels: map[string]string{"alertname": "HighCPU", "ok_name": "z"}, Value: 1, ObservedAt: now}},
		},
		{
			name: "cluster value that cannot be a managed cluster", mapping: byPrefix, status: 200, skipped: 2,
			body: payload(
				alert("firing", map[string]string{"alertname": "HighCPU", "cluster": "Prod_East"}, t0, time.Time{}),
				alert("firing", map[string]string{"alertname": "HighCPU", "cluster": "kube-system"}, t0, time.Time{}),
			),
		},
		{
			name: "fixed metric name", mapping: Mapping{ClusterLabel: "cluster", MetricName: "scoreflow_alert_firing"}, status: 200,
			body: payload(
				alert("firing", map[string]string{"alertname": "HighCPU", "cluster": "c1"}, t0, time.Time{}),
				alert("firing", map[string]string{"cluster": "c2"}, t0, time.Time{}),
			),
			want: []contract.Sample{
				{Metric: "scoreflow_alert_firing", Cluster: "c1", Labels: map[string]string{"alertname": "HighCPU"}, Value: 1, ObservedAt: now},
				{Metric: "scoreflow_alert_firing", Cluster: "c2", Value: 1, ObservedAt: now},
			},
		},
		{
			name: "no alertname and no fixed name: skipped", mapping: Mapping{ClusterLabel: "cluster", MetricPrefix: ""}, status: 200, skipped: 1,
			body: payload(
				alert("firing", map[string]string{"cluster": "c2"}, t0, time.Time{}),
				alert("firing", map[string]string{"alertname": "5xxRate", "cluster": "c1"}, t0, time.Time{}),
			),
			want: []contract.Sample{{Metric: "_5xxRate", Cluster: "c1", Labels: map[string]string{"alertname": "5xxRate"}, Value: 1, ObservedAt: now}},
		},
		{
			name: "missing times: dated at receipt all the same", mapping: byPrefix, status: 200,
			body: payload(
				alert("firing", map[string]string{"alertname": "A", "cluster": "c1"}, time.Time{}, time.Time{}),
				alert("resolved", map[string]string{"alertname": "A", "cluster": "c2"}, t0, time.Time{}),
			),
			want: []contract.Sample{
				{Metric: "alert_A", Cluster: "c1", Labels: map[string]string{"alertname": "A"}, Value: 1, ObservedAt: now},
				{Metric: "alert_A", Cluster: "c2", Labels: map[string]string{"alertname": "A"}, Value: 0, ObservedAt: now},
			},
		},
		{
			name: "unknown alert status skipped", mapping: byPrefix, status: 200, skipped: 1,
			body: payload(alert("pending", map[string]string{"alertname": "A", "cluster": "c1"}, t0, time.Time{})),
		},
		{name: "empty alerts", mapping: byPrefix, status: 200, body: payload()},
		{name: "null alerts", mapping: byPrefix, status: 200, body: `{"version":"4","status":"firing","alerts":null}`},
		{
			name: "unknown fields are tolerated (newer Alertmanager)", mapping: byPrefix, status: 200,
			body: `{"version":"4","truncatedAlerts":0,"futureField":{"x":1},"alerts":[{"status":"firing","labels":{"alertname":"A","cluster":"c1"},"startsAt":"2026-03-01T11:50:00.123Z","endsAt":"0001-01-01T00:00:00Z","extra":true}]}`,
			want: []contract.Sample{{Metric: "alert_A", Cluster: "c1", Labels: map[string]string{"alertname": "A"}, Value: 1, ObservedAt: now}},
		},
		{name: "malformed JSON", mapping: byPrefix, status: 400, body: `{"version":"4","alerts":[`, errHas: "not an Alertmanager webhook JSON"},
		{name: "not an object", mapping: byPrefix, status: 400, body: `[1,2]`, errHas: "not an Alertmanager webhook JSON"},
		{name: "trailing garbage", mapping: byPrefix, status: 400, body: payload() + "x", errHas: "not an Alertmanager webhook JSON"},
		{name: "wrong version", mapping: byPrefix, status: 400, body: `{"version":"3","alerts":[]}`, errHas: `version is "3"`},
		{name: "missing version", mapping: byPrefix, status: 400, body: `{"alerts":[]}`, errHas: `version is ""`},
		{name: "bad time", mapping: byPrefix, status: 400, body: `{"version":"4","alerts":[{"status":"firing","startsAt":"yesterday"}]}`, errHas: "not an Alertmanager webhook JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := functest.NewSink(t, functest.MetricChanged)
			_, url := adapter(t, tt.mapping, s.URL, 5*time.Second)

			status, ans := post(t, url, tt.body)
			if status != tt.status {
				t.Fatalf("status = %d (%+v), want %d", status, ans, tt.status)
			}
			if tt.errHas != "" && !strings.Contains(ans.Error, tt.errHas) {
				t.Errorf("error = %q, want it to contain %q", ans.Error, tt.errHas)
			}
			if tt.errHas == "" && ans.Error != "" {
				t.Errorf("unexpected error %q", ans.Error)
			}
			if ans.Skipped != tt.skipped || ans.Samples != len(tt.want) {
				t.Errorf("answer = %+v, want %d samples, %d skipped", ans, len(tt.want), tt.skipped)
			}
			got := take(s) // Send returned before the answer: everything sent has arrived
			if tt.want == nil {
				if len(got) != 0 {
					t.Fatalf("sink got %d events, want none", len(got))
				}
				return
			}
			if len(got) != 1 || ans.Events != 1 {
				t.Fatalf("sink got %d events (answer says %d), want exactly 1", len(got), ans.Events)
			}
			e := got[0]
			if e.typ != contract.TypeMetricChanged || e.source != "scoreflow/alertmanager-adapter" || e.ext != "metric-sources" {
				t.Errorf("event type/source/extension = %q %q %q", e.typ, e.source, e.ext)
			}
			if wantTime := latest(tt.want); !e.time.Equal(wantTime) {
				t.Errorf("event time = %v, want the latest observation %v", e.time, wantTime)
			}
			functest.EqualSamples(t, "event", e.data.Samples, tt.want)
		})
	}
}

func TestMethodAndPath(t *testing.T) {
	_, url := adapter(t, Mapping{ClusterLabel: "cluster"}, "http://127.0.0.1:1", time.Second)
	for _, tt := range []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, "/", http.StatusMethodNotAllowed},
		{http.MethodPut, "/", http.StatusMethodNotAllowed},
		{http.MethodPost, "/alerts", http.StatusNotFound},
	} {
		req, _ := http.NewRequest(tt.method, url+tt.path, strings.NewReader(payload()))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("%s %s = %d, want %d", tt.method, tt.path, resp.StatusCode, tt.status)
		}
	}
}

func TestTooLarge(t *testing.T) {
	_, url := adapter(t, Mapping{ClusterLabel: "cluster"}, "http://127.0.0.1:1", time.Second)
	big := `{"version":"4","groupKey":"` + strings.Repeat("x", DefaultMaxBodyBytes) + `"}`
	if status, _ := post(t, url, big); status != http.StatusRequestEntityTooLarge {
		t.Fatalf("status = %d, want 413", status)
	}
	// A smaller bound, for a body of unknown length too (chunked: cut off while read).
	_, url = adapterWith(t, Options{Mapping: Mapping{ClusterLabel: "cluster"}, MaxBodyBytes: 1000}, "http://127.0.0.1:1")
	body := payload(alert("firing", map[string]string{"alertname": "A", "cluster": "c1", "x": strings.Repeat("y", 1000)}, t0, time.Time{}))
	resp, err := http.Post(url+"/", "application/json", io.MultiReader(strings.NewReader(body)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a %d-byte body of unknown length under a 1000-byte bound: %d, want 413", len(body), resp.StatusCode)
	}
}

// Callers present the token of the adapter's Secret as a bearer token, compared with the file's
// content on every request (a rotated Secret applies at once). Anyone else is refused 401 and
// nothing reaches the sink; with no token mounted yet every caller gets 503, which Alertmanager
// retries.
func TestCallersPresentTheToken(t *testing.T) {
	s := functest.NewSink(t, functest.MetricChanged)
	tokenFile := filepath.Join(t.TempDir(), "token")
	_, url := adapterWith(t, Options{Mapping: Mapping{ClusterLabel: "cluster", MetricPrefix: "alert_"}, SendTimeout: 5 * time.Second, TokenFile: tokenFile}, s.URL)
	body := payload(alert("firing", map[string]string{"alertname": "HighCPU", "cluster": "c1"}, t0, time.Time{}))
	send := func(authorization string) (int, Answer) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url+"/", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var ans Answer
		_ = json.NewDecoder(resp.Body).Decode(&ans)
		return resp.StatusCode, ans
	}
	if status, ans := send("Bearer anything"); status != http.StatusServiceUnavailable {
		t.Errorf("no token mounted: %d %+v, want 503", status, ans)
	}
	if err := os.WriteFile(tokenFile, []byte("s3cret-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		authorization string
		status        int
	}{{"", 401}, {"Bearer s3cret", 401}, {"Bearer s3cret-10", 401}, {"Basic s3cret-1", 401}, {"Bearer s3cret-1", 200}} {
		if status, ans := send(c.authorization); status != c.status {
			t.Errorf("Authorization %q: %d %+v, want %d", c.authorization, status, ans, c.status)
		}
	}
	if got := take(s); len(got) != 1 {
		t.Fatalf("the sink got %d events, want only the one with the token", len(got))
	}
	if err := os.WriteFile(tokenFile, []byte("s3cret-2"), 0o600); err != nil {
		t.Fatal(err)
	}
	if status, _ := send("Bearer s3cret-1"); status != http.StatusUnauthorized {
		t.Errorf("the rotated-out token: %d, want 401", status)
	}
	if status, _ := send("Bearer s3cret-2"); status != http.StatusOK {
		t.Errorf("the new token: %d, want 200", status)
	}
}

// At most MaxConcurrent notifications are handled at once; one more is answered 503 at once, and
// handled once a slot frees.
func TestConcurrentNotificationsAreBounded(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 8)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		w.WriteHeader(http.StatusAccepted)
	}))
	defer slow.Close()
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free()
	_, url := adapterWith(t, Options{Mapping: Mapping{ClusterLabel: "cluster", MetricPrefix: "alert_"}, SendTimeout: 30 * time.Second, MaxConcurrent: 2}, slow.URL)
	body := payload(alert("firing", map[string]string{"alertname": "HighCPU", "cluster": "c1"}, t0, time.Time{}))
	done := make(chan int, 2)
	for i := 0; i < 2; i++ {
		go func() {
			resp, err := http.Post(url+"/", "application/json", strings.NewReader(body))
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
	}
	for i := 0; i < 2; i++ {
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the first two notifications did not reach the sink")
		}
	}
	resp, err := http.Post(url+"/", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a third notification while two are handled: %d, want 503", resp.StatusCode)
	}
	free()
	for i := 0; i < 2; i++ {
		if code := <-done; code != http.StatusOK {
			t.Errorf("a notification handled within the bound: %d, want 200", code)
		}
	}
	if status, _ := post(t, url, body); status != http.StatusOK {
		t.Errorf("once the slots are free: %d, want 200", status)
	}
}

// A sink that is down gets 503 (Alertmanager retries); once it is back the retried payload arrives.
func TestSinkDownThenRecovers(t *testing.T) {
	// Reserve a port, then close it: nothing listens there until the sink "recovers".
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	a, url := adapter(t, Mapping{ClusterLabel: "cluster", MetricPrefix: "alert_"}, "http://"+addr, 500*time.Millisecond)
	body := payload(alert("firing", map[string]string{"alertname": "HighCPU", "cluster": "c1"}, t0, time.Time{}))

	start := time.Now()
	status, ans := post(t, url, body)
	if status != http.StatusServiceUnavailable || !strings.Contains(ans.Error, "sink unavailable") {
		t.Fatalf("sink down: status %d %+v, want 503 sink unavailable", status, ans)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("answer took %v: --send-timeout 500ms should bound it", d)
	}
	if n := value(a.metrics.events.WithLabelValues("error")); n != 1 {
		t.Errorf("send errors counted = %v, want 1", n)
	}

	// The sink comes back on the same address; Alertmanager resends the same notification.
	s := functest.NewSinkAt(t, addr, functest.MetricChanged)

	status, ans = post(t, url, body)
	if status != http.StatusOK || ans.Events != 1 {
		t.Fatalf("after recovery: status %d %+v, want 200 with 1 event", status, ans)
	}
	got := take(s)
	if len(got) != 1 {
		t.Fatalf("sink got %d events, want 1", len(got))
	}
	functest.EqualSamples(t, "after recovery", got[0].data.Samples, []contract.Sample{{Metric: "alert_HighCPU", Cluster: "c1", Labels: map[string]string{"alertname": "HighCPU"}, Value: 1, ObservedAt: now}})
}

// A sink that answers 5xx is a transient failure too; a 2xx after it delivers.
func TestSinkAnswers5xx(t *testing.T) {
	s := functest.NewSink(t, functest.MetricChanged)
	s.Answer(http.StatusServiceUnavailable)
	_, url := adapter(t, Mapping{ClusterLabel: "cluster", MetricPrefix: "alert_"}, s.URL, 300*time.Millisecond)
	body := payload(alert("resolved", map[string]string{"alertname": "A", "cluster": "c1"}, t0, t1))
	if status, _ := post(t, url, body); status != http.StatusServiceUnavailable {
		t.Fatalf("sink 503: status %d, want 503", status)
	}
	s.Answer(0)
	if status, _ := post(t, url, body); status != http.StatusOK {
		t.Fatalf("sink back: status %d, want 200", status)
	}
	if got := take(s); len(got) != 1 || len(got[0].data.Samples) != 1 || got[0].data.Samples[0].Value != 0 {
		t.Fatalf("sink got %+v, want one event with the resolved sample", got)
	}
}

// More alerts than one event may carry are split into several events, none over the bound.
func TestSplitsLargeNotifications(t *testing.T) {
	s := functest.NewSink(t, functest.MetricChanged)
	a, url := adapter(t, Mapping{ClusterLabel: "cluster", MetricPrefix: "alert_"}, s.URL, 30*time.Second)

	n := contract.MaxSamples + 1
	alerts := make([]Alert, n)
	for i := range alerts {
		alerts[i] = alert("firing", map[string]string{"alertname": "A", "cluster": fmt.Sprintf("c%d", i)}, t0, time.Time{})
	}
	var buf bytes.Buffer
	buf.WriteString(payload(alerts...))
	status, ans := post(t, url, buf.String())
	if status != http.StatusOK || ans.Events != 2 || ans.Samples != n {
		t.Fatalf("status %d %+v, want 200, 2 events, %d samples", status, ans, n)
	}
	got := take(s)
	if len(got) != 2 || len(got[0].data.Samples) != contract.MaxSamples || len(got[1].data.Samples) != 1 {
		t.Fatalf("events carry %d samples, want %d then 1", func() []int {
			var l []int
			for _, e := range got {
				l = append(l, len(e.data.Samples))
			}
			return l
		}(), contract.MaxSamples)
	}
	if last := got[1].data.Samples[0].Cluster; last != fmt.Sprintf("c%d", n-1) {
		t.Errorf("last sample is for %s, want c%d", last, n-1)
	}
	if v := value(a.metrics.alerts.WithLabelValues(StatusFiring)); v != float64(n) {
		t.Errorf("firing alerts counted = %v, want %d", v, n)
	}
}

func TestMetricsCountOutcomes(t *testing.T) {
	s := functest.NewSink(t, functest.MetricChanged)
	a, url := adapter(t, Mapping{ClusterLabel: "cluster", MetricPrefix: "alert_"}, s.URL, 5*time.Second)
	post(t, url, payload(
		alert("firing", map[string]string{"alertname": "A", "cluster": "c1", "bad-label": "x"}, t0, time.Time{}),
		alert("resolved", map[string]string{"alertname": "A", "cluster": "c2"}, t0, t1),
		alert("firing", map[string]string{"alertname": "A"}, t0, time.Time{}),
		alert("firing", map[string]string{"alertname": "A", "cluster": "No"}, t0, time.Time{}),
	))
	post(t, url, "{")
	for _, tt := range []struct {
		c    prometheus.Collector
		want float64
	}{
		{a.metrics.alerts.WithLabelValues(StatusFiring), 1},
		{a.metrics.alerts.WithLabelValues(StatusResolved), 1},
		{a.metrics.alerts.WithLabelValues(SkipNoCluster), 1},
		{a.metrics.alerts.WithLabelValues(SkipInvalidCluster), 1},
		{a.metrics.dropped, 1},
		{a.metrics.events.WithLabelValues("ok"), 1},
		{a.metrics.payloads.WithLabelValues("200"), 1},
		{a.metrics.payloads.WithLabelValues("400"), 1},
	} {
		if got := value(tt.c); got != tt.want {
			t.Errorf("%v = %v, want %v", tt.c, got, tt.want)
		}
	}
}

func TestMappingValidate(t *testing.T) {
	for _, tt := range []struct {
		m  Mapping
		ok bool
	}{
		{Mapping{ClusterLabel: "cluster", MetricPrefix: "alert_"}, true},
		{Mapping{ClusterLabel: "cluster", MetricName: "scoreflow_alert_firing"}, true},
		{Mapping{ClusterLabel: "cluster"}, true},
		{Mapping{ClusterLabel: "cluster-name"}, false},
		{Mapping{ClusterLabel: ""}, false},
		{Mapping{ClusterLabel: "cluster", MetricName: "alert-firing"}, false},
		{Mapping{ClusterLabel: "cluster", MetricPrefix: "1alert_"}, false},
	} {
		if err := tt.m.Validate(); (err == nil) != tt.ok {
			t.Errorf("%+v: err = %v, want ok=%v", tt.m, err, tt.ok)
		}
	}
}

func TestSanitizeMetricName(t *testing.T) {
	for in, want := range map[string]string{
		"alert_HighCPU":      "alert_HighCPU",
		"alert_Disk-Full.v2": "alert_Disk_Full_v2",
		"5xx":                "_5xx",
		"a:b c":              "a:b_c",
		"alert_é":            "alert__",
		"":                   "",
	} {
		got := SanitizeMetricName(in)
		if got != want {
			t.Errorf("SanitizeMetricName(%q) = %q, want %q", in, got, want)
		}
		if got != "" && contract.ValidateMetricName(got) != nil {
			t.Errorf("SanitizeMetricName(%q) = %q is not a valid metric name", in, got)
		}
	}
}

// value reads a counter (testutil would need a module go.mod does not list).
func value(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	close(ch)
	var sum float64
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			panic(err)
		}
		sum += d.GetCounter().GetValue()
	}
	return sum
}

// TestNotificationsAreDatedAtReceipt: an alert that keeps firing is notified again every
// repeat_interval with the same startsAt; each notification's sample is dated when it arrives, so
// scores built from it are renewed and do not expire while the alert still fires. A resolution
// that happened before a late (retried) firing notification arrived is still dated after it, so
// order-keeping consumers take it as the newer state rather than drop it as stale.
func TestNotificationsAreDatedAtReceipt(t *testing.T) {
	s := functest.NewSink(t, functest.MetricChanged)
	clock := now
	snd, err := function.NewSender(s.URL, overrides)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{Mapping: Mapping{ClusterLabel: "cluster", MetricPrefix: "alert_"}, Source: "scoreflow/alertmanager-adapter",
		Now: func() time.Time { return clock }}, snd, slog.New(slog.NewTextHandler(t.Output(), nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)

	labels := map[string]string{"alertname": "HighCPU", "cluster": "c1"}
	started := now.Add(-3 * time.Hour)
	resolved := now.Add(4*time.Hour - time.Minute) // before the last firing notification arrives
	steps := []struct {
		name     string
		received time.Time
		alert    Alert
		value    float64
	}{
		{"first notification", now, alert("firing", labels, started, time.Time{}), 1},
		{"repeat after repeat_interval", now.Add(4 * time.Hour), alert("firing", labels, started, time.Time{}), 1},
		{"resolved, endsAt before the repeat arrived", now.Add(4*time.Hour + 5*time.Minute), alert("resolved", labels, started, resolved), 0},
	}
	var last time.Time
	for _, st := range steps {
		clock = st.received
		if status, ans := post(t, srv.URL, payload(st.alert)); status != http.StatusOK || ans.Events != 1 {
			t.Fatalf("%s: status %d %+v", st.name, status, ans)
		}
		got := take(s)
		if len(got) != 1 || len(got[0].data.Samples) != 1 {
			t.Fatalf("%s: sink got %+v, want one event with one sample", st.name, got)
		}
		smp := got[0].data.Samples[0]
		if smp.Value != st.value || !smp.ObservedAt.Equal(st.received) || !got[0].time.Equal(st.received) {
			t.Errorf("%s: value %v observed %s (event time %s), want %v observed at receipt %s",
				st.name, smp.Value, smp.ObservedAt, got[0].time, st.value, st.received)
		}
		if !smp.ObservedAt.After(last) {
			t.Errorf("%s: observed %s, not after the previous notification's %s", st.name, smp.ObservedAt, last)
		}
		last = smp.ObservedAt
	}
}
