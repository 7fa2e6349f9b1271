package scoring

import (
	"fmt"
	"regexp"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

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

// Name fills the format from labels. A missing label, or a result that is not a legal score name
// (a label value with a space, say), is an error: such a result is refused, never written.
func (f NameFormat) Name(labels map[string]string) (string, error) {
	var missing string
	name := placeholder.ReplaceAllStringFunc(string(f), func(m string) string {
		key := m[2 : len(m)-1]
		v, ok := labels[key]
		if !ok && missing == "" {
			missing = key
		}
		return v
	})
	if missing != "" {
		return "", fmt.Errorf("score name format %q: the series has no label %q", string(f), missing)
	}
	if err := contract.ValidateScoreName(name); err != nil {
		return "", err
	}
	return name, nil
}
