package contract

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// The hand-written checks accept exactly what the pattern and Kubernetes' own validation accept:
// edge cases, then random strings over an alphabet of the allowed and a few refused bytes.
func TestNameChecksMatchTheirPatterns(t *testing.T) {
	score := regexp.MustCompile(ScoreNamePattern)
	cases := []string{"", "a", "-", "a-", "-a", "a-b", "a--b", "A", "aB", "a.b", ".a", "a.", "a;b", "app1;gpu0",
		"é", "a b", "a\x00", strings.Repeat("a", 63), strings.Repeat("a", 64), "0", "9-9", "a_b", "_a"}
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "az09AZ-._:;@+= /\x00é"
	for range 200000 {
		b := make([]byte, rng.IntN(6))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		cases = append(cases, string(b))
	}
	for _, s := range cases {
		if got, want := isDNS1123Label(s), len(validation.IsDNS1123Label(s)) == 0; got != want {
			t.Errorf("isDNS1123Label(%q) = %v, validation.IsDNS1123Label says %v", s, got, want)
		}
		if got, want := isScoreName(s), score.MatchString(s); got != want {
			t.Errorf("isScoreName(%q) = %v, ScoreNamePattern says %v", s, got, want)
		}
	}
}
