package scorewriter

import (
	"context"
	"errors"
	"net"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// classify tells a failed hub request's reason and whether waiting may cure it. Conflicts are
// handled before this, by re-reading.
func classify(err error) (reason contract.Reason, transient bool) {
	switch {
	case apierrors.IsTooManyRequests(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err),
		apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err), apierrors.IsUnexpectedServerError(err):
		return contract.ReasonUnavailable, true
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return contract.ReasonForbidden, false
	case apierrors.IsNotFound(err):
		// Creating in a namespace that does not exist: a cluster being registered, or just removed.
		return contract.ReasonUnknownCluster, true
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsRequestEntityTooLargeError(err):
		return contract.ReasonRejected, false
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return contract.ReasonRejected, status.Status().Code >= 500
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) {
		return contract.ReasonUnavailable, true
	}
	// Anything else (connection refused, EOF, TLS while the server restarts) is a transport failure.
	return contract.ReasonUnavailable, true
}
