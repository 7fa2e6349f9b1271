package promtest

import (
	"context"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/uuid"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Ping is the event a Knative PingSource sends with data as its configuration.
func Ping(data string) event.Event {
	e := cloudevents.NewEvent()
	e.SetID(uuid.NewString())
	e.SetSource("/apis/v1/namespaces/scoreflow/pingsources/test")
	e.SetType(contract.TypePing)
	e.SetTime(time.Now())
	_ = e.SetData(cloudevents.ApplicationJSON, []byte(data))
	return e
}

// Send posts e to a function's URL over HTTP with the CloudEvents SDK (binary mode, as the broker
// does) and returns the HTTP status and the reply event, if any.
func Send(t testing.TB, url string, e event.Event) (int, *event.Event) {
	t.Helper()
	c, err := cloudevents.NewClientHTTP(cloudevents.WithTarget(url))
	if err != nil {
		t.Fatal(err)
	}
	reply, res := c.Request(context.Background(), e)
	var httpRes *cehttp.Result
	if !cloudevents.ResultAs(res, &httpRes) {
		t.Fatalf("sending %s: %v", e.Type(), res)
	}
	return httpRes.StatusCode, reply
}
