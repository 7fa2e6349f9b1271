package jsonscan

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"testing"
)

// skipped tells whether Skip takes b whole.
func skipped(b []byte) bool {
	s := Scanner{B: b}
	s.Skip()
	s.End()
	return !s.Bad
}

// Skip takes exactly the JSON encoding/json takes: random values, and random mutations of them
// (bytes dropped, changed, repeated), agree with json.Valid.
func TestSkipIsValid(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 9))
	var value func(depth int) []byte
	value = func(depth int) []byte {
		var b bytes.Buffer
		switch k := r.IntN(9); {
		case k == 0 && depth < 6:
			b.WriteByte('{')
			for i := range r.IntN(4) {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString(` "k` + strconv.Itoa(i) + `" : `)
				b.Write(value(depth + 1))
			}
			b.WriteByte('}')
		case k == 1 && depth < 6:
			b.WriteString("[ ")
			for i := range r.IntN(4) {
				if i > 0 {
					b.WriteString(" ,")
				}
				b.Write(value(depth + 1))
			}
			b.WriteByte(']')
		case k == 2:
			b.WriteString([]string{"true", "false", "null"}[r.IntN(3)])
		case k == 3:
			b.WriteString([]string{"0", "-0", "12", "-3.25", "1e9", "2.5E-07", "6e+2", "0.000"}[r.IntN(8)])
		default:
			b.WriteString([]string{`""`, `"a b"`, `"\"\\\/\b\f\n\r\t"`, `"\u00e9\uD83D\uDE00"`, `"é"`, "\"\xff\xfe\"", `"x\u12aFy"`}[r.IntN(7)])
		}
		return b.Bytes()
	}
	var valid, invalid int
	for range 50000 {
		b := value(0)
		if !skipped(b) || !json.Valid(b) {
			t.Fatalf("valid JSON not taken: %s", b)
		}
		for range 1 + r.IntN(2) {
			i := r.IntN(len(b))
			switch r.IntN(3) {
			case 0:
				b = append(b[:i], b[i+1:]...)
			case 1:
				const alphabet = "{}[]\",:.-+0123456789eEtfnulrsabx\\ \x01\x7f\xff"
				b[i] = alphabet[r.IntN(len(alphabet))]
			case 2:
				b = append(b[:i], append([]byte{b[i]}, b[i:]...)...)
			}
			if len(b) == 0 {
				break
			}
		}
		if got, want := skipped(b), json.Valid(b); got != want {
			t.Fatalf("Skip takes %q: %v, json.Valid: %v", b, got, want)
		} else if want {
			valid++
		} else {
			invalid++
		}
	}
	if valid < 5000 || invalid < 5000 {
		t.Fatalf("mutations gave %d valid and %d invalid values: too few of one to prove much", valid, invalid)
	}
}

// Int reads JSON integers that fit and refuses fractions, exponents and leading zeros; Str takes
// plain strings only.
func TestIntAndStr(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "-0": 0, "60": 60, "-2147483648": -2147483648, " 123456789012345678": 123456789012345678} {
		s := Scanner{B: []byte(in)}
		if got := s.Int(); s.Bad || got != want || s.I != len(in) {
			t.Errorf("Int(%q) = %d (bad %v, at %d), want %d", in, got, s.Bad, s.I, want)
		}
	}
	for _, in := range []string{"", "-", "01", "1.0", "1e3", "1E3", "1234567890123456789", "x"} {
		s := Scanner{B: []byte(in)}
		if s.Int(); !s.Bad {
			t.Errorf("Int(%q) taken", in)
		}
	}
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
