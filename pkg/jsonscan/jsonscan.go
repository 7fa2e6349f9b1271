// Package jsonscan reads JSON in one pass over its bytes, for a decoder of one plain, known shape
// (a Prometheus range answer) that builds its result as it reads, keeping no copy of the input.
//
// A Scanner has no errors of its own. Anything it does not take (malformed JSON, or a token
// outside the plain subset a method reads) sets Bad, after which every read returns at once, and
// the decoder's caller falls back to the general decoder, which gives the result or the error it
// always gave: a Scanner changes what a decode costs, never what it gives.
package jsonscan

// Scanner reads B from I.
type Scanner struct {
	B   []byte
	I   int
	Bad bool
}

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
// backslash.
var plain = func() (p [256]bool) {
	for c := range 256 {
		p[c] = c >= 0x20 && c < 0x7f && c != '"' && c != '\\'
	}
	return p
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

// Number reads a number as JSON writes one, -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, and
// returns its bytes.
func (s *Scanner) Number() []byte {
	s.WS()
	b, start := s.B, s.I
	i := start
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
		return nil
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			s.Fail()
			return nil
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
			return nil
		}
		i = j
	}
	s.I = i
	return b[start:i]
}

// digits returns where the run of digits at b[i:] ends.
func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}
