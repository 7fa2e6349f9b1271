package normalize

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// placeholder is what fill recognises: ${name}, name a Prometheus label name.
var placeholder = regexp.MustCompile(`\$\{([a-zA-Z_][a-zA-Z0-9_]*)\}`)

// NameFormat fills score names from series labels, as the Dynamic Scoring Framework's
// scoreDimensionFormat does: "${app};${device}" with labels app=web, device=gpu0 is "web;gpu0".
type NameFormat string

// Validate checks that the format refers to labels by valid names and that a filled-in name can be
// a legal score name.
func (f NameFormat) Validate() error {
	if f == "" {
		return fmt.Errorf("score name format is empty")
	}
	sample := placeholder.ReplaceAllString(string(f), "x")
	if err := contract.ValidateScoreName(sample); err != nil {
		return fmt.Errorf("score name format %q cannot make a legal score name: %v", string(f), err)
	}
	return nil
}

// Labels are the label names the format refers to, each once, in the order they first appear.
func (f NameFormat) Labels() []string {
	var out []string
	for _, m := range placeholder.FindAllStringSubmatch(string(f), -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

// Name fills the format from labels. A missing label, or a result that is not a legal score name
// (a label value with a space, say), is an error: such a result is refused, never written.
func (f NameFormat) Name(labels map[string]string) (string, error) {
	return f.NameFrom(func(k string) (string, bool) { v, ok := labels[k]; return v, ok })
}

// NameFrom is Name with labels looked up by label: for callers holding labels in another form
// (a Prometheus series' model.Metric), which then need not be copied per series.
func (f NameFormat) NameFrom(label func(string) (string, bool)) (string, error) {
	name, missing := f.fill(label)
	if missing != "" {
		return "", fmt.Errorf("score name format %q: the series has no label %q", string(f), missing)
	}
	if err := contract.ValidateScoreName(name); err != nil {
		return "", err
	}
	return name, nil
}

// fill replaces each placeholder with its label's value (a missing label with ""), and names the
// first missing label. It scans by hand rather than with placeholder, which it matches exactly (a
// test proves it): a fleet's scorer fills a name per series on every evaluation.
func (f NameFormat) fill(label func(string) (string, bool)) (name, missing string) {
	s := string(f)
	var b strings.Builder
	b.Grow(len(s) + 16)
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), missing
		}
		b.WriteString(s[:i])
		j := i + 2
		for j < len(s) && isLabelByte(s[j], j == i+2) {
			j++
		}
		if j == i+2 || j >= len(s) || s[j] != '}' {
			// Not a placeholder: keep "${" and scan on after it.
			b.WriteString("${")
			s = s[i+2:]
			continue
		}
		key := s[i+2 : j]
		v, ok := label(key)
		if !ok && missing == "" {
			missing = key
		}
		b.WriteString(v)
		s = s[j+1:]
	}
}

func isLabelByte(c byte, first bool) bool {
	return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || !first && '0' <= c && c <= '9'
}
