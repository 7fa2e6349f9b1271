package jsonscan

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// Number takes exactly the numbers encoding/json takes, and returns their bytes: random strings
// of number characters agree with json.Valid.
func TestNumberIsJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 9))
	const alphabet = "-+.eE0123456789"
	var valid, invalid int
	for range 100000 {
		b := make([]byte, 1+r.IntN(8))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		s := Scanner{B: b}
		got := s.Number()
		s.End()
		if want := json.Valid(b); s.Bad == want {
			t.Fatalf("Number takes %q: %v, json.Valid: %v", b, !s.Bad, want)
		} else if want {
			valid++
			if string(got) != string(b) {
				t.Fatalf("Number(%q) = %q", b, got)
			}
		} else {
			invalid++
		}
	}
	if valid < 5000 || invalid < 5000 {
		t.Fatalf("%d valid and %d invalid numbers: too few of one to prove much", valid, invalid)
	}
}

// Str takes plain strings only: no escapes, nothing outside printable ASCII.
func TestStr(t *testing.T) {
	for in, want := range map[string]string{`"abc"`: "abc", `""`: "", ` "a b"`: "a b"} {
		s := Scanner{B: []byte(in)}
		if got := s.Str(); s.Bad || string(got) != want {
			t.Errorf("Str(%q) = %q (bad %v)", in, got, s.Bad)
		}
	}
	for _, in := range []string{`"a\"b"`, `"é"`, "\"\x7f\"", "\"\x1f\"", `"abc`, `abc`} {
		s := Scanner{B: []byte(in)}
		if s.Str(); !s.Bad {
			t.Errorf("Str(%q) taken", in)
		}
	}
}

// Object and Array read each member once, in order, and refuse what JSON does not allow between
// them.
func TestObjectAndArray(t *testing.T) {
	s := Scanner{B: []byte(` { "a" : [ "x" , "y" ] , "b" : [] } `)}
	var got []string
	s.Object(func(key []byte) {
		got = append(got, string(key))
		s.Array(func() { got = append(got, string(s.Str())) })
	})
	s.End()
	if s.Bad || len(got) != 4 || got[0] != "a" || got[1] != "x" || got[2] != "y" || got[3] != "b" {
		t.Errorf("read %q (bad %v)", got, s.Bad)
	}
	for _, in := range []string{`{"a":[],}`, `{"a" []}`, `{"a":["x" "y"]}`, `{"a":["x",]}`, `{"a":[]`, `{"a":[]} x`, `{a:[]}`} {
		s := Scanner{B: []byte(in)}
		s.Object(func([]byte) { s.Array(func() { s.Str() }) })
		s.End()
		if !s.Bad {
			t.Errorf("%s taken", in)
		}
	}
}
