// Package jsonscan reads JSON in one pass over its bytes, for decoders of one plain, known shape
// (a Prometheus answer, a page of a Kubernetes list) that build their result as they read: a
// fleet's answer is megabytes, and decoding it through reflection costs many times the work then
// done with it.
//
// A Scanner has no errors of its own. Anything it does not take (malformed JSON, or a token
// outside the plain subset a method reads) sets Bad, after which every read returns at once, and
// the decoder's caller falls back to the general decoder, which gives the result or the error it
// always gave: a Scanner changes what a decode costs, never what it gives.
package jsonscan

import "slices"

// Scanner reads B from I.
type Scanner struct {
	B   []byte
	I   int
	Bad bool
}

// Grow makes room in s for one more element, doubling it when it is full: append grows a large
// slice by a quarter, which for a fleet's result means copying it many times over.
func Grow[T any](s []T) []T {
	if len(s) < cap(s) {
		return s
	}
	return slices.Grow(s, max(len(s), 8))
}

// maxDepth bounds the nesting Skip follows; deeper input is left to the general decoder
// (encoding/json refuses nesting past 10,000).
const maxDepth = 1000

// Fail marks the input as not taken.
func (s *Scanner) Fail() { s.Bad = true }

// WS skips whitespace.
func (s *Scanner) WS() {
	for s.I < len(s.B) {
		switch s.B[s.I] {
		case ' ', '\t', '\n', '\r':
			s.I++
		default:
			return
		}
	}
}

// Peek skips whitespace and returns the next byte (0 at the end).
func (s *Scanner) Peek() byte {
	s.WS()
	if s.I < len(s.B) {
		return s.B[s.I]
	}
	return 0
}

// Expect reads the byte c, after any whitespace.
func (s *Scanner) Expect(c byte) {
	if s.Peek() != c {
		s.Fail()
		return
	}
	s.I++
}

// End reads the whitespace after the top-level value, which must end the input.
func (s *Scanner) End() {
	s.WS()
	if s.I != len(s.B) {
		s.Fail()
	}
}

// Str reads a string token without escapes, of printable ASCII only (what it decodes to is then
// its bytes, whatever a decoder's rules for escapes and invalid UTF-8), and returns its bytes.
func (s *Scanner) Str() []byte {
	if s.Peek() != '"' {
		s.Fail()
		return nil
	}
	b, start := s.B, s.I+1
	j := start
	for j < len(b) && plain[b[j]] {
		j++
	}
	if j == len(b) || b[j] != '"' {
		s.Fail()
		return nil
	}
	s.I = j + 1
	return b[start:j]
}

// plain holds the bytes Str takes inside a string: printable ASCII but the quote and the
// backslash. ordinary holds those skipString passes over without a look: all but the quote, the
// backslash and control characters.
var plain, ordinary = func() (p, o [256]bool) {
	for c := range 256 {
		o[c] = c >= 0x20 && c != '"' && c != '\\'
		p[c] = o[c] && c < 0x7f
	}
	return p, o
}()

// Object calls field for each key of an object, which must read the key's value.
func (s *Scanner) Object(field func(key []byte)) {
	s.list('{', '}', func() {
		k := s.Str()
		s.Expect(':')
		if !s.Bad {
			field(k)
		}
	})
}

// Array calls elem for each element of an array, which must read it.
func (s *Scanner) Array(elem func()) { s.list('[', ']', elem) }

// list reads an object or an array: open, then elements separated by commas, each read by elem,
// then end.
func (s *Scanner) list(open, end byte, elem func()) {
	s.Expect(open)
	if s.Bad {
		return
	}
	if s.Peek() == end {
		s.I++
		return
	}
	for !s.Bad {
		elem()
		switch s.Peek() {
		case ',':
			s.I++
		case end:
			s.I++
			return
		default:
			s.Fail()
		}
	}
}

// Null reads null if it comes next, and tells whether it did.
func (s *Scanner) Null() bool {
	if s.Peek() != 'n' {
		return false
	}
	s.literal("null")
	return !s.Bad
}

// Bool reads true or false.
func (s *Scanner) Bool() bool {
	switch s.Peek() {
	case 't':
		s.literal("true")
		return true
	case 'f':
		s.literal("false")
	default:
		s.Fail()
	}
	return false
}

// Int reads an integer written without a fraction or an exponent, of at most 18 digits.
func (s *Scanner) Int() int64 {
	s.WS()
	b, i := s.B, s.I
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	start := i
	var n int64
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		n = n*10 + int64(b[i]-'0')
		i++
	}
	digits := i - start
	if digits == 0 || digits > 18 || (digits > 1 && b[start] == '0') ||
		(i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E')) {
		s.Fail()
		return 0
	}
	s.I = i
	if neg {
		return -n
	}
	return n
}

// Skip reads any value, checking it is JSON as encoding/json checks (a string's escapes, not its
// UTF-8), and keeps nothing of it.
func (s *Scanner) Skip() { s.skip(0) }

func (s *Scanner) skip(depth int) {
	if depth > maxDepth {
		s.Fail()
		return
	}
	switch s.Peek() {
	case '{':
		s.list('{', '}', func() {
			s.skipString()
			s.Expect(':')
			s.skip(depth + 1)
		})
	case '[':
		s.list('[', ']', func() { s.skip(depth + 1) })
	case '"':
		s.skipString()
	case 't':
		s.literal("true")
	case 'f':
		s.literal("false")
	case 'n':
		s.literal("null")
	default:
		s.number()
	}
}

// skipString reads a string token, any escapes in it valid.
func (s *Scanner) skipString() {
	if s.Peek() != '"' {
		s.Fail()
		return
	}
	b := s.B
	for j := s.I + 1; j < len(b); j++ {
		for j < len(b) && ordinary[b[j]] {
			j++
		}
		if j == len(b) {
			break
		}
		switch c := b[j]; {
		case c == '"':
			s.I = j + 1
			return
		case c < 0x20:
			s.Fail()
			return
		case c == '\\':
			j++
			if j >= len(b) {
				s.Fail()
				return
			}
			switch b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(b) || !isHex(b[j+1]) || !isHex(b[j+2]) || !isHex(b[j+3]) || !isHex(b[j+4]) {
					s.Fail()
					return
				}
				j += 4
			default:
				s.Fail()
				return
			}
		}
	}
	s.Fail()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// literal reads the word w (true, false or null).
func (s *Scanner) literal(w string) {
	if len(s.B)-s.I < len(w) || string(s.B[s.I:s.I+len(w)]) != w {
		s.Fail()
		return
	}
	s.I += len(w)
}

// number reads a number as JSON writes one: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (s *Scanner) number() {
	b, i := s.B, s.I
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i)
	default:
		s.Fail()
		return
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			s.Fail()
			return
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			s.Fail()
			return
		}
		i = j
	}
	s.I = i
}

// digits returns where the run of digits at b[i:] ends.
func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}
