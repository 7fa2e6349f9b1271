package contract

import (
	"strings"
	"unicode/utf8"
)

// Bounds of the CloudEvents attributes a sender chooses. Every answer echoes source and id (so
// that the sender can correlate it), the writer remembers answers by them, and a refusal must stay
// small (MaxRefusalBytes): functions refuse longer ones before any handler sees them. Knative's own
// sources stay well inside: a PingSource's source is /apis/v1/namespaces/NS/pingsources/NAME, ids
// are UUIDs.
const (
	MaxSourceLength = 256
	MaxIDLength     = 128
	MaxTypeLength   = 128
)

// MaxEventBytes bounds the body of one request to a function. It fits the largest legitimate
// score.updated: MaxItems (10,000) clusters with 63-character names, each with 14 scores of
// 20-character names (7.9 MB; contract's tests build it). Larger requests are refused with 413
// before they are read.
const MaxEventBytes = 8 << 20

// Truncate cuts s to at most max bytes of valid UTF-8, ending in "…" when it was cut, so that a
// string a sender chose costs what a sensible one costs when it is echoed.
func Truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	const ellipsis = "…"
	if max < len(ellipsis) {
		return ""
	}
	cut := max - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	// A sender's bytes need not be UTF-8: "?" keeps the length, where JSON would spend six bytes
	// (\ufffd) on each.
	return strings.ToValidUTF8(s[:cut], "?") + ellipsis
}
