package scorewriter

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// ReasonTooManyResources refuses an item whose AddOnPlacementScore would be one more than the
// writer keeps in a cluster's namespace (Options.MaxResourcesPerCluster). Not retriable.
const ReasonTooManyResources contract.Reason = "TooManyResources"

// failure is how the writer treats a failed hub request. Conflicts are handled before this, by
// re-reading.
type failure struct {
	reason contract.Reason
	// wait: retrying here, after a backoff, may cure it (the hub is down, slow or throttling).
	wait bool
	// redeliver: a later redelivery by the broker may succeed (answer 503 rather than 4xx).
	redeliver bool
}

func classify(err error) failure {
	switch {
	case apierrors.IsTooManyRequests(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err),
		apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err), apierrors.IsUnexpectedServerError(err):
		return failure{contract.ReasonUnavailable, true, true}
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return failure{contract.ReasonForbidden, false, false}
	case apierrors.IsNotFound(err):
		// Creating in a namespace that does not exist yet: a cluster being registered. Not worth
		// holding its updates here, but worth the broker's redelivery later.
		return failure{contract.ReasonUnknownCluster, false, true}
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsRequestEntityTooLargeError(err):
		return failure{contract.ReasonRejected, false, false}
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		server := status.Status().Code >= 500
		return failure{contract.ReasonRejected, server, server}
	}
	// Anything else (connection refused, EOF, timeouts, TLS while the server restarts) is a
	// transport failure.
	return failure{contract.ReasonUnavailable, true, true}
}
