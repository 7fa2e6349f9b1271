package static

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/promserver/canned"
	"github.com/scoreflow/scoreflow/pkg/scorer"
)

// BenchmarkHandle1000 and BenchmarkHandle10000 answer a ping scoring 1,000 and 10,000 clusters,
// two devices each, from the table file: reading it (parsed again only when its bytes change) to
// the score.updated encoded.
func BenchmarkHandle1000(b *testing.B)  { benchHandle(b, 1000) }
func BenchmarkHandle10000(b *testing.B) { benchHandle(b, 10000) }

func benchHandle(b *testing.B, n int) {
	var doc strings.Builder
	doc.WriteString(`{"rows":[`)
	for i := range n {
		if i > 0 {
			doc.WriteString(",")
		}
		fmt.Fprintf(&doc, `{"cluster":"cluster-%05d","app":"app01","device":"gpu0","performance":%d,"power":%d},`, i, i%97, 100+i%89)
		fmt.Fprintf(&doc, `{"cluster":"cluster-%05d","app":"app01","device":"cpu","performance":%d}`, i, i%13)
	}
	doc.WriteString(`]}`)
	path := filepath.Join(b.TempDir(), "table.json")
	if err := os.WriteFile(path, []byte(doc.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	s := &Scorer{File: &File{Path: path, Log: slog.New(slog.NewJSONHandler(io.Discard, nil))}}
	h := scorer.Handler("/scorers/static", scorer.Route{"dev.knative.sources.ping": s.Ping})
	canned.BenchHandle(b, h, functest.Ping(`{"resource":"demo-performance-score"}`), n)
}
