package contract

import (
	"fmt"
	"strings"
)

// FieldError is one validation problem, naming the field by its JSON path (items[2].scores[0].value).
type FieldError struct {
	Field   string
	Reason  Reason
	Message string
}

func (e FieldError) Error() string { return e.Field + ": " + e.Message }

// FieldErrors is every problem found in one document.
type FieldErrors []FieldError

func (es FieldErrors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

// Reason is the reason of the first problem: the one a reply reports.
func (es FieldErrors) Reason() Reason {
	if len(es) == 0 {
		return ""
	}
	return es[0].Reason
}

// orNil keeps "no problems" a nil error, not an empty non-nil slice.
func (es FieldErrors) orNil() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

func fieldErr(reason Reason, field string, format string, args ...any) FieldError {
	return FieldError{Field: field, Reason: reason, Message: fmt.Sprintf(format, args...)}
}
