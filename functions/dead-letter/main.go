// Command dead-letter is the broker's dead-letter sink. Every event whose delivery was refused or
// ran out of retries arrives here with the broker's knativeerrordest, knativeerrorcode and
// knativeerrordata extensions; the function sends an io.scoreflow.score.write.failed naming it
// (reason DeadLettered) to the broker, K_SINK. It sends rather than replies because Knative drops
// a dead-letter sink's reply. It answers 202 once the broker took the report, 503 when it could
// not, so the broker retries the dead-letter delivery.
package main

import (
	"context"

	"github.com/scoreflow/scoreflow/pkg/function"
)

func main() {
	fn := function.New("dead-letter", "turns dead-lettered events into io.scoreflow.score.write.failed events sent to the broker (K_SINK)")
	newSender := fn.SinkFlags()
	fn.Main(func(ctx context.Context) error {
		s, err := newSender()
		if err != nil {
			return err
		}
		return fn.Serve(ctx, newHandler(fn.Source(), s, fn.Log, fn.Registry).handle, nil)
	})
}
