package function_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/function"
)

// Whoever sends chooses the event type: junk types must not grow /metrics without bound.
func TestEventTypeLabelsAreBounded(t *testing.T) {
	fn := function.New("test", "test")
	url := functest.Serve(t, fn, func(context.Context, event.Event) function.Response {
		return function.Response{Status: http.StatusBadRequest}
	})
	for i := 0; i < 3*function.MaxTypeLabels; i++ {
		e := cloudevents.NewEvent()
		e.SetID(fmt.Sprint(i))
		e.SetSource("test")
		e.SetType(fmt.Sprintf("junk.%d", i))
		functest.Send(t, url, e)
	}
	_, body := functest.Get(t, url+"/metrics")
	series := 0
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "scoreflow_events_received_total{") {
			series++
		}
	}
	if series > function.MaxTypeLabels+1 || !strings.Contains(body, `type="other"`) {
		t.Errorf("%d series of scoreflow_events_received_total after %d junk types, want at most %d and an \"other\"", series, 3*function.MaxTypeLabels, function.MaxTypeLabels+1)
	}
}
