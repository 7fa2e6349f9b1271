package health

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterscheme "open-cluster-management.io/api/client/cluster/clientset/versioned/scheme"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	sigsjson "sigs.k8s.io/json"

	"github.com/scoreflow/scoreflow/harness/localhub"
)

// sameAsSigsJSON checks that a page scanListPage took is what sigs.k8s.io/json decodes from it.
func sameAsSigsJSON(t *testing.T, raw []byte, page listPage) {
	t.Helper()
	var want listPage
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &want); err != nil {
		t.Fatalf("scanListPage took what sigs.k8s.io/json refuses (%v):\n%s", err, raw)
	}
	if !reflect.DeepEqual(page, want) {
		t.Fatalf("scanListPage:\n got %+v\nwant %+v\n%s", page, want, raw)
	}
}

// pageWriter writes a random ManagedClusterList page as JSON text: the fields the score reads in
// every form the API allows, fields it does not read of every JSON type (escapes, non-ASCII,
// numbers, nesting), keys in random order and random whitespace.
type pageWriter struct {
	r *rand.Rand
	b bytes.Buffer
}

func (w *pageWriter) ws() {
	if w.r.IntN(4) == 0 {
		w.b.WriteString([]string{" ", "\n  ", "\t", "\r\n"}[w.r.IntN(4)])
	}
}

// object writes the members, each a key and a function writing its value, in random order.
func (w *pageWriter) object(members ...any) {
	type member struct {
		key   string
		value func()
	}
	var ms []member
	for i := 0; i < len(members); i += 2 {
		ms = append(ms, member{members[i].(string), members[i+1].(func())})
	}
	w.r.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
	w.ws()
	w.b.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			w.b.WriteByte(',')
		}
		w.ws()
		fmt.Fprintf(&w.b, "%q", m.key)
		w.ws()
		w.b.WriteByte(':')
		w.ws()
		m.value()
		w.ws()
	}
	w.b.WriteByte('}')
}

func (w *pageWriter) array(n int, elem func()) {
	w.b.WriteByte('[')
	for i := range n {
		if i > 0 {
			w.b.WriteByte(',')
		}
		w.ws()
		elem()
		w.ws()
	}
	w.b.WriteByte(']')
}

func (w *pageWriter) raw(s string) func() { return func() { w.b.WriteString(s) } }

// unread is a value of a field the score does not read.
func (w *pageWriter) unread() func() {
	return w.raw([]string{`"plain"`, `"esc\"aped\\ \u00e9\n\/"`, `"καλημέρα"`, `-0.5e+3`, `0`, `12345678901234567890`,
		`true`, `false`, `null`, `[]`, `{}`, `[1,"a",{"b":[null,{"c":"d"}]}]`,
		`{"kubectl.kubernetes.io/last-applied-configuration":"{\"apiVersion\":\"v1\",\"kind\":\"ManagedCluster\"}\n"}`,
		`{"f:metadata":{"f:labels":{".":{},"f:name":{}}}}`}[w.r.IntN(14)])
}

func (w *pageWriter) time() func() {
	return w.raw([]string{`"2026-03-01T12:00:00Z"`, `"2026-03-01T11:59:59Z"`, `"2026-02-28T23:00:00+01:00"`,
		`"2026-03-01T12:00:00.5Z"`, `"2025-12-31T23:59:59-05:30"`}[w.r.IntN(5)])
}

func (w *pageWriter) condition() {
	m := []any{
		"type", w.raw(fmt.Sprintf("%q", []string{CondAvailable, CondJoined, CondHubAccepted, CondHubDenied, CondClockSynced, "Other"}[w.r.IntN(6)])),
		"status", w.raw(fmt.Sprintf("%q", []string{"True", "False", "Unknown"}[w.r.IntN(3)])),
	}
	if w.r.IntN(4) > 0 {
		m = append(m, "reason", w.raw(fmt.Sprintf("%q", []string{"", "ManagedClusterLeaseUpdateStopped", "R"}[w.r.IntN(3)])))
	}
	switch w.r.IntN(6) {
	case 0:
		m = append(m, "lastTransitionTime", w.raw("null"))
	case 1:
	default:
		m = append(m, "lastTransitionTime", w.time())
	}
	for range w.r.IntN(3) {
		m = append(m, []string{"message", "observedGeneration", "Type", "extra"}[w.r.IntN(4)], w.unread())
	}
	w.object(dedupe(m)...)
}

func (w *pageWriter) item(i int) {
	meta := []any{"name", w.raw(fmt.Sprintf(`"cluster-%d"`, i))}
	switch w.r.IntN(5) {
	case 0:
		meta = append(meta, "deletionTimestamp", w.time())
	case 1:
		meta = append(meta, "deletionTimestamp", w.raw("null"))
	}
	for range w.r.IntN(4) {
		meta = append(meta, []string{"uid", "labels", "annotations", "managedFields", "Name", "resourceVersion"}[w.r.IntN(6)], w.unread())
	}
	spec := []any{}
	if w.r.IntN(5) > 0 {
		spec = append(spec, "hubAcceptsClient", w.raw([]string{"true", "false"}[w.r.IntN(2)]))
	}
	if w.r.IntN(3) > 0 {
		spec = append(spec, "leaseDurationSeconds", w.raw([]string{"0", "60", "-1", "2147483647", "-2147483648"}[w.r.IntN(5)]))
	}
	if w.r.IntN(3) == 0 {
		spec = append(spec, "taints", w.unread())
	}
	status := []any{}
	switch w.r.IntN(5) {
	case 0:
	case 1:
		status = append(status, "conditions", w.raw("null"))
	default:
		status = append(status, "conditions", func() { w.array(w.r.IntN(5), w.condition) })
	}
	if w.r.IntN(3) == 0 {
		status = append(status, "clusterClaims", w.unread())
	}
	m := []any{"metadata", func() { w.object(dedupe(meta)...) }}
	if w.r.IntN(6) > 0 {
		m = append(m, "spec", func() { w.object(dedupe(spec)...) })
	}
	if w.r.IntN(6) > 0 {
		m = append(m, "status", func() { w.object(dedupe(status)...) })
	}
	if w.r.IntN(3) == 0 {
		m = append(m, "apiVersion", w.raw(`"cluster.open-cluster-management.io/v1"`), "kind", w.raw(`"ManagedCluster"`))
	}
	w.object(m...)
}

func (w *pageWriter) page() []byte {
	w.b.Reset()
	m := []any{"kind", w.raw(`"ManagedClusterList"`), "apiVersion", w.raw(`"cluster.open-cluster-management.io/v1"`)}
	meta := []any{"resourceVersion", w.raw(`"7"`)}
	if w.r.IntN(2) == 0 {
		meta = append(meta, "continue", w.raw(fmt.Sprintf(`"token-%d"`, w.r.IntN(100))))
	}
	if w.r.IntN(8) > 0 {
		m = append(m, "metadata", func() { w.object(meta...) })
	}
	switch w.r.IntN(8) {
	case 0:
	case 1:
		m = append(m, "items", w.raw("null"))
	default:
		m = append(m, "items", func() { w.array(w.r.IntN(6), func() { w.item(w.r.IntN(100)) }) })
	}
	w.object(m...)
	w.ws()
	return bytes.Clone(w.b.Bytes())
}

// dedupe keeps the first of members sharing a key: a repeated key is a case of its own.
func dedupe(members []any) []any {
	seen := map[string]bool{}
	var out []any
	for i := 0; i < len(members); i += 2 {
		if k := members[i].(string); !seen[k] {
			seen[k] = true
			out = append(out, members[i], members[i+1])
		}
	}
	return out
}

// Every page as the API server could write it is taken, and decodes as sigs.k8s.io/json decodes
// it; so does whatever a random mutation of it (bytes dropped, changed, repeated) leaves that is
// still taken, and what is not taken goes to sigs.k8s.io/json as before.
func TestScanListPageAgreesWithSigsJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	w := &pageWriter{r: r}
	var mutatedTaken int
	for range 8000 {
		raw := w.page()
		page, ok := scanListPage(raw)
		if !ok {
			t.Fatalf("a plain page was not taken:\n%s", raw)
		}
		sameAsSigsJSON(t, raw, page)
		m := bytes.Clone(raw)
		for range 1 + r.IntN(3) {
			i := r.IntN(len(m))
			switch r.IntN(3) {
			case 0:
				m = append(m[:i], m[i+1:]...)
			case 1:
				const alphabet = "{}[]\",:.-0123456789eEtfn\\ u\x01\xff"
				m[i] = alphabet[r.IntN(len(alphabet))]
			case 2:
				m = append(m[:i], append([]byte{m[i]}, m[i:]...)...)
			}
		}
		if page, ok := scanListPage(m); ok {
			mutatedTaken++
			sameAsSigsJSON(t, m, page)
		}
	}
	if mutatedTaken < 1000 {
		t.Fatalf("only %d mutated pages were taken: the comparison proves little", mutatedTaken)
	}
	t.Logf("%d of 8000 mutated pages taken", mutatedTaken)
}

// Pages that differ from a plain one at one place: taken or not as the comment says, and when
// taken, decoded as sigs.k8s.io/json decodes them.
func TestScanListPageEdges(t *testing.T) {
	const cond = `{"type":"ManagedClusterConditionAvailable","status":"True","lastTransitionTime":"2026-03-01T12:00:00Z","reason":"R","message":"m"}`
	page := func(item string) string { return `{"kind":"ManagedClusterList","metadata":{},"items":[` + item + `]}` }
	item := func(meta, spec, conditions string) string {
		return page(`{"metadata":{"name":"c1"` + meta + `},"spec":{"hubAcceptsClient":true` + spec + `},"status":{"conditions":` + conditions + `}}`)
	}
	plain := item("", `,"leaseDurationSeconds":60`, "["+cond+"]")
	for _, c := range []struct {
		name  string
		raw   string
		taken bool
	}{
		{"plain", plain, true},
		{"deletionTimestamp null: none", item(`,"deletionTimestamp":null`, "", "[]"), true},
		{"deletionTimestamp", item(`,"deletionTimestamp":"2026-03-01T12:00:00+02:00"`, "", "[]"), true},
		{"lastTransitionTime null: zero", item("", "", `[{"type":"T","status":"True","lastTransitionTime":null}]`), true},
		{"conditions empty", item("", "", "[]"), true},
		{"conditions null", item("", "", "null"), true},
		{"items null", page("")[:len(page(""))-3] + `null}`, true},
		{"no items", `{"metadata":{"continue":"x"}}`, true},
		{"a read key in another case is not read", item(`,"Name":"other","DeletionTimestamp":"x"`, "", "[]"), true},
		{"unread strings: escapes, non-ASCII, invalid UTF-8", item(`,"labels":{"a":"\"q\" \u00e9 \ud83d\ude00 é `+"\xff"+`"}`, "", "[]"), true},
		{"unread numbers and nesting", item(`,"x":[-0,0.5,1e9,-2.5E-3,[[[]]],{"y":{}}]`, "", "[]"), true},
		{"whitespace everywhere", " \n" + strings.ReplaceAll(strings.ReplaceAll(plain, `,"`, " ,\n\t\""), `":`, "\"\r: ") + "\n", true},

		// Left to sigs.k8s.io/json, which reads them (or refuses them) its own way.
		{"a read string with an escape", item("", "", `[{"type":"\u0054","status":"True"}]`), false},
		{"a name with an escape", strings.Replace(plain, `"c1"`, `"\u0063luster"`, 1), false},
		{"a name not ASCII", strings.Replace(plain, `"c1"`, `"clüster"`, 1), false},
		{"a read key with an escape", strings.Replace(plain, `"name"`, `"n\u0061me"`, 1), false},
		{"a name given twice", item(`,"name":"c2"`, "", "[]"), false},
		{"conditions given twice", strings.Replace(plain, `"status":{`, `"status":{"conditions":[],`, 1), false},
		{"spec given twice", strings.Replace(plain, `"spec":{`, `"spec":{},"spec":{`, 1), false},
		{"spec null", strings.Replace(plain, `"spec":{"hubAcceptsClient":true,"leaseDurationSeconds":60}`, `"spec":null`, 1), false},
		{"hubAcceptsClient a string", strings.Replace(plain, `"hubAcceptsClient":true`, `"hubAcceptsClient":"true"`, 1), false},
		{"lease with a fraction", strings.Replace(plain, `:60`, `:60.0`, 1), false},
		{"lease with an exponent", strings.Replace(plain, `:60`, `:6e1`, 1), false},
		{"lease past int32", strings.Replace(plain, `:60`, `:2147483648`, 1), false},
		{"a time that does not parse", strings.Replace(plain, `2026-03-01T12:00:00Z`, `yesterday`, 1), false},
		{"an empty time", strings.Replace(plain, `"2026-03-01T12:00:00Z"`, `""`, 1), false},
		{"an unread string with a bad escape", item(`,"uid":"a\x"`, "", "[]"), false},
		{"an unread string with a control character", item(",\"uid\":\"a\x01\"", "", "[]"), false},
		{"an unread number with a leading zero", item(`,"generation":01`, "", "[]"), false},
		{"an unread literal misspelt", item(`,"x":nul`, "", "[]"), false},
		{"trailing data", plain + "{}", false},
		{"cut short", plain[:len(plain)-1], false},
	} {
		t.Run(c.name, func(t *testing.T) {
			page, ok := scanListPage([]byte(c.raw))
			if ok != c.taken {
				t.Fatalf("taken %v, want %v:\n%s", ok, c.taken, c.raw)
			}
			if ok {
				sameAsSigsJSON(t, []byte(c.raw), page)
			}
		})
	}
}

// The pages a real API server writes for ManagedClusters (managed fields, labels, annotations
// holding JSON, a cluster being deleted, conditions, a continue token) are taken, and decode as
// sigs.k8s.io/json decodes them.
func TestScanListPageTakesTheHubsPages(t *testing.T) {
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mcs := hub.Cluster.ClusterV1().ManagedClusters()
	for _, name := range []string{"east", "gone", "north", "west"} {
		if err := hub.AddCluster(ctx, name, map[string]string{"region": name, "cluster.open-cluster-management.io/clusterset": "default"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"east", "gone", "west"} {
		if err := hub.MarkAvailable(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	gone, err := mcs.Get(ctx, "gone", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gone.Finalizers = []string{clusterv1.ManagedClusterFinalizer}
	gone.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"cluster.open-cluster-management.io/v1","kind":"ManagedCluster","metadata":{"name":"gone"}}` + "\n<&>é"}
	if _, err := mcs.Update(ctx, gone, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := mcs.Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	opts := metav1.ListOptions{Limit: 3}
	var pages, items int
	for {
		raw, err := hub.Cluster.ClusterV1().RESTClient().Get().Resource("managedclusters").
			VersionedParams(&opts, clusterscheme.ParameterCodec).Do(ctx).Raw()
		if err != nil {
			t.Fatal(err)
		}
		page, ok := scanListPage(raw)
		if !ok {
			t.Fatalf("the API server's page was not taken:\n%s", raw)
		}
		sameAsSigsJSON(t, raw, page)
		pages++
		items += len(page.Items)
		if page.Metadata.Continue == "" {
			break
		}
		opts.Continue = page.Metadata.Continue
	}
	if pages != 2 || items != 4 {
		t.Fatalf("%d pages of %d clusters, want 2 of 4", pages, items)
	}
}
