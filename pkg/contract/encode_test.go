package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
)

// randString draws from names that need no escaping and from everything encoding/json escapes:
// quotes, backslashes, control bytes, HTML characters, non-ASCII, invalid UTF-8, U+2028.
func randString(r *rand.Rand) string {
	const plain = "abcz09-.;:@+=_AZ"
	specials := []string{`"`, `\`, "\n", "\t", "\x00", "\x1f", "\x7f", "<", ">", "&", "é", "日本", "\xff", "\xe2\x80\xa8", "\xe2\x80\xa9", "\U0001F600", " ", "/"}
	var b []byte
	for range r.IntN(12) {
		if r.IntN(6) == 0 {
			b = append(b, specials[r.IntN(len(specials))]...)
		} else {
			b = append(b, plain[r.IntN(len(plain))])
		}
	}
	return string(b)
}

func randFloat(r *rand.Rand) float64 {
	switch r.IntN(10) {
	case 0:
		return []float64{0, math.Copysign(0, -1), 1e-6, 9.99e-7, 1e21, 9.99e20, -1e-7, 1e-300, 5e-324, math.MaxFloat64, 0.1, 100, -100}[r.IntN(13)]
	case 1:
		return (r.Float64() - 0.5) * math.Pow(10, float64(r.IntN(60)-30))
	case 2:
		return []float64{math.NaN(), math.Inf(1), math.Inf(-1)}[r.IntN(3)]
	}
	return float64(r.IntN(201) - 100)
}

func randScoreUpdated(r *rand.Rand) ScoreUpdated {
	s := ScoreUpdated{Resource: randString(r), NeverExpires: r.IntN(3) == 0}
	if r.IntN(3) == 0 {
		t := time.Unix(r.Int64N(1<<36)-1<<35, r.Int64N(1e9)).In(time.FixedZone("", (r.IntN(48)-24)*1800))
		if r.IntN(20) == 0 {
			t = time.Date(10000+r.IntN(10), 1, 1, 0, 0, 0, 0, time.UTC) // json.Marshal refuses it
		}
		s.ValidUntil = &t
	}
	if r.IntN(15) != 0 {
		s.Items = make([]ClusterScores, r.IntN(5))
		for i := range s.Items {
			s.Items[i].Cluster = randString(r)
			if r.IntN(10) != 0 {
				s.Items[i].Scores = make([]Score, r.IntN(4))
				for j := range s.Items[i].Scores {
					s.Items[i].Scores[j] = Score{Name: randString(r), Value: randFloat(r)}
				}
			}
		}
	}
	return s
}

// The hand-rolled encoder writes exactly what json.Marshal writes, and fails where it fails, with
// the same message; decoding its output gives back the value.
func TestAppendScoreUpdatedIsJSONMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	var compared int
	for range 100000 {
		s := randScoreUpdated(r)
		want, wantErr := json.Marshal(s)
		got, err := appendScoreUpdated(nil, &s)
		if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
			t.Fatalf("%#v: error %v, json.Marshal %v", s, err, wantErr)
		}
		if err != nil {
			continue
		}
		compared++
		if !bytes.Equal(got, want) {
			t.Fatalf("%#v:\n got %s\nwant %s", s, got, want)
		}
		for i := range s.Items {
			want, _ := json.Marshal(&s.Items[i])
			if got, _ := appendClusterScores(nil, &s.Items[i]); !bytes.Equal(got, want) {
				t.Fatalf("item %#v:\n got %s\nwant %s", s.Items[i], got, want)
			}
		}
		var back ScoreUpdated
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%s: %v", got, err)
		}
	}
	if compared < 20000 {
		t.Fatalf("only %d encodings compared", compared)
	}
}

// NewScoreUpdated builds the event SetData would have built from the value: same attributes, same
// data bytes, not base64, and the resource also in the scoreflowresource extension.
func TestNewScoreUpdatedIsSetData(t *testing.T) {
	vu := time.Date(2026, 3, 1, 12, 5, 0, 0, time.UTC)
	s := ScoreUpdated{Resource: "cpu-idle", ValidUntil: &vu, Items: []ClusterScores{
		{Cluster: "cluster1", Scores: []Score{{Name: "cpuIdle", Value: 42}, {Name: "app;gpu0", Value: -100}}},
		{Cluster: "cluster2", Scores: []Score{{Name: "cpuIdle", Value: 0}}},
	}}
	observed := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	got, err := NewScoreUpdated("/scorers/x", observed, s)
	if err != nil {
		t.Fatal(err)
	}
	want := cloudevents.NewEvent()
	want.SetID(got.ID())
	want.SetSource("/scorers/x")
	want.SetType(TypeScoreUpdated)
	want.SetTime(observed)
	want.SetSubject("cpu-idle")
	want.SetExtension(ExtResource, "cpu-idle")
	if err := want.SetData(cloudevents.ApplicationJSON, s); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("event\n%v\nwant\n%v", got, want)
	}
}

// A score name repeated in an item is refused at the repeat, in short lists (compared in place)
// and long ones (a map), and only there.
func TestRepeatedScoreName(t *testing.T) {
	for _, n := range []int{2, 5, 16, 17, 40} {
		for dupAt := 1; dupAt < n; dupAt += max(1, n/4) {
			item := ClusterScores{Cluster: "c1"}
			for j := range n {
				item.Scores = append(item.Scores, Score{Name: fmt.Sprintf("s%d", j), Value: 1})
			}
			item.Scores[dupAt].Name = item.Scores[dupAt/2].Name
			s := ScoreUpdated{Resource: "r", Items: []ClusterScores{item}}
			fe := s.ValidateItem(0)
			want := fmt.Sprintf("items[0].scores[%d].name", dupAt)
			if fe == nil || fe.Field != want || !strings.Contains(fe.Error(), "appears twice") {
				t.Errorf("%d scores, repeat at %d: %v, want %s appears twice", n, dupAt, fe, want)
			}
			item.Scores[dupAt].Name = "unique"
			if fe := s.ValidateItem(0); fe != nil {
				t.Errorf("%d scores without a repeat: %v", n, fe)
			}
		}
	}
}

// Whole numbers of every magnitude, around the powers of two and ten, and negative zero are
// written as encoding/json writes them.
func TestAppendFloatWholeNumbers(t *testing.T) {
	var fs []float64
	for k := range 70 {
		for _, base := range []float64{math.Ldexp(1, k), math.Pow(10, float64(k)/3)} {
			base = math.Trunc(base)
			for _, d := range []float64{-1, 0, 1} {
				fs = append(fs, base+d, -(base + d))
			}
		}
	}
	fs = append(fs, math.Copysign(0, -1), 999999999999999, 1e15, 1e15-1, 1e15+1, 123456789012345, -0.5, 0.5)
	for _, f := range fs {
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendFloat(nil, f); string(got) != string(want) {
			t.Errorf("appendFloat(%v) = %s, json.Marshal %s", f, got, want)
		}
	}
}
