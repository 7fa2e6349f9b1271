package contract

import (
	"encoding/json"
	"math"
	"strconv"
)

// appendScoreUpdated appends s as encoding/json marshals it, byte for byte, without reflection: a
// fleet's score.updated holds tens of thousands of scores, and marshalling them through
// reflection cost more than scoring them. The encode tests hold it to json.Marshal.
func appendScoreUpdated(b []byte, s *ScoreUpdated) ([]byte, error) {
	b = append(b, `{"resource":`...)
	b = appendString(b, s.Resource)
	b = append(b, `,"items":`...)
	if s.Items == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range s.Items {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendClusterScores(b, &s.Items[i]); err != nil {
				return nil, err
			}
		}
		b = append(b, ']')
	}
	if s.ValidUntil != nil {
		t, err := s.ValidUntil.MarshalJSON()
		if err != nil {
			_, err = json.Marshal(s) // encoding/json's own wording of the error
			return nil, err
		}
		b = append(b, `,"validUntil":`...)
		b = append(b, t...) // RFC 3339 digits and letters: nothing to escape
	}
	if s.NeverExpires {
		b = append(b, `,"neverExpires":true`...)
	}
	return append(b, '}'), nil
}

// appendClusterScores appends c as encoding/json marshals it.
func appendClusterScores(b []byte, c *ClusterScores) ([]byte, error) {
	b = append(b, `{"cluster":`...)
	b = appendString(b, c.Cluster)
	b = append(b, `,"scores":`...)
	if c.Scores == nil {
		return append(b, "null}"...), nil
	}
	b = append(b, '[')
	for j, sc := range c.Scores {
		if j > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendString(b, sc.Name)
		b = append(b, `,"value":`...)
		if math.IsNaN(sc.Value) || math.IsInf(sc.Value, 0) {
			_, err := json.Marshal(sc.Value) // encoding/json's own wording of the error
			return nil, err
		}
		b = appendFloat(b, sc.Value)
		b = append(b, '}')
	}
	return append(b, "]}"...), nil
}

// appendString appends s quoted. Names that need no escaping (every valid cluster and score name)
// are copied; any other string is left to encoding/json, with its HTML-safe and UTF-8 rules.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendFloat appends a finite f as encoding/json writes a float64.
func appendFloat(b []byte, f float64) []byte {
	abs := math.Abs(f)
	if abs < 1e15 && f == math.Trunc(f) && (f != 0 || !math.Signbit(f)) {
		// A whole number (every score is one) well inside float64's exact integers: its shortest
		// decimal is its integer's digits, written without strconv's float formatting.
		return strconv.AppendInt(b, int64(f), 10)
	}
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	start := len(b)
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9
		n := len(b) - start
		if n >= 4 && b[len(b)-4] == 'e' && b[len(b)-3] == '-' && b[len(b)-2] == '0' {
			b[len(b)-2] = b[len(b)-1]
			b = b[:len(b)-1]
		}
	}
	return b
}
