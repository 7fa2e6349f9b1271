// Command dead-letter is the broker's dead-letter sink: it turns every dead-lettered event into an
// io.scoreflow.score.write.failed (reason DeadLettered) sent to the broker, K_SINK (package
// github.com/scoreflow/scoreflow/pkg/deadletter).
package main

import (
	"context"

	"github.com/scoreflow/scoreflow/pkg/deadletter"
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
		return fn.Serve(ctx, deadletter.New(fn.Source(), s, fn.Log, fn.Registry).Handle, nil)
	})
}
