package health

import (
	"math"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/scoreflow/scoreflow/pkg/jsonscan"
)

// scanListPage reads a page of a ManagedClusterList into a listPage in one pass over its bytes,
// skipping every field the score does not read, and gives what sigs.k8s.io/json's
// UnmarshalCaseSensitivePreserveInts gives: decoding a fleet's list through reflection cost ten
// times scoring it, most of it on fields (labels, messages, claims, managed fields) never read.
//
// It takes a page as the API server writes one. Anything else (malformed JSON, null or another
// type where a read field's value should be, a read string with escapes or bytes outside
// printable ASCII, a read key given twice, a time that does not parse, a lease that does not fit
// an int32) returns ok=false, and the caller decodes the page with sigs.k8s.io/json, which gives
// the result or the error it always gave: this path changes the cost only.
func scanListPage(raw []byte) (page listPage, ok bool) {
	d := pageScanner{Scanner: jsonscan.Scanner{B: raw}}
	var seen keys
	d.Object(func(key []byte) {
		switch string(key) {
		case "metadata":
			seen.once(&d.Scanner, 0)
			var seenMeta keys
			d.Object(func(key []byte) {
				if string(key) != "continue" {
					d.Skip()
					return
				}
				seenMeta.once(&d.Scanner, 0)
				page.Metadata.Continue = string(d.Str())
			})
		case "items":
			seen.once(&d.Scanner, 1)
			if d.Null() {
				return
			}
			page.Items = []listItem{}
			d.Array(func() {
				page.Items = append(jsonscan.Grow(page.Items), listItem{})
				d.item(&page.Items[len(page.Items)-1])
			})
		default:
			d.Skip()
		}
	})
	d.End()
	if d.Bad {
		return listPage{}, false
	}
	return page, true
}

// pageScanner reads a list page.
type pageScanner struct {
	jsonscan.Scanner
	// types, statuses and reasons are the page's few distinct condition words, each kept once.
	types, statuses, reasons []string
	// conds holds the conditions of every item, each item's a slice of it: one allocation
	// growing with the page rather than a few for each cluster. A slice taken before conds grew
	// keeps the array it was taken from, whose conditions never change after.
	conds []listCondition
	// lastTime is the time read last, from lastTimeText: a cluster's conditions often change
	// together.
	lastTime     metav1.Time
	lastTimeText string
}

// keys are the read keys of one object seen so far: one given twice is left to the general
// decoder (which merges a repeated object into the first, and keeps the last of anything else).
type keys uint8

func (k *keys) once(s *jsonscan.Scanner, bit uint) {
	if *k&(1<<bit) != 0 {
		s.Fail()
	}
	*k |= 1 << bit
}

func (d *pageScanner) item(it *listItem) {
	var seen keys
	d.Object(func(key []byte) {
		switch string(key) {
		case "metadata":
			seen.once(&d.Scanner, 0)
			var seenMeta keys
			d.Object(func(key []byte) {
				switch string(key) {
				case "name":
					seenMeta.once(&d.Scanner, 0)
					it.Metadata.Name = string(d.Str())
				case "deletionTimestamp":
					seenMeta.once(&d.Scanner, 1)
					if !d.Null() {
						t := d.time()
						it.Metadata.DeletionTimestamp = &t
					}
				default:
					d.Skip()
				}
			})
		case "spec":
			seen.once(&d.Scanner, 1)
			var seenSpec keys
			d.Object(func(key []byte) {
				switch string(key) {
				case "hubAcceptsClient":
					seenSpec.once(&d.Scanner, 0)
					it.Spec.HubAcceptsClient = d.Bool()
				case "leaseDurationSeconds":
					seenSpec.once(&d.Scanner, 1)
					n := d.Int()
					if n < math.MinInt32 || n > math.MaxInt32 {
						d.Fail()
					}
					it.Spec.LeaseDurationSeconds = int32(n)
				default:
					d.Skip()
				}
			})
		case "status":
			seen.once(&d.Scanner, 2)
			var seenStatus keys
			d.Object(func(key []byte) {
				if string(key) != "conditions" {
					d.Skip()
					return
				}
				seenStatus.once(&d.Scanner, 0)
				if d.Null() {
					return
				}
				start := len(d.conds)
				d.Array(func() {
					d.conds = append(jsonscan.Grow(d.conds), listCondition{})
					d.condition(&d.conds[len(d.conds)-1])
				})
				it.Status.Conditions = d.conds[start:len(d.conds):len(d.conds)]
				if it.Status.Conditions == nil {
					it.Status.Conditions = []listCondition{}
				}
			})
		default:
			d.Skip()
		}
	})
}

func (d *pageScanner) condition(c *listCondition) {
	var seen keys
	d.Object(func(key []byte) {
		switch string(key) {
		case "type":
			seen.once(&d.Scanner, 0)
			c.Type = d.word(&d.types)
		case "status":
			seen.once(&d.Scanner, 1)
			c.Status = metav1.ConditionStatus(d.word(&d.statuses))
		case "reason":
			seen.once(&d.Scanner, 2)
			c.Reason = d.word(&d.reasons)
		case "lastTransitionTime":
			seen.once(&d.Scanner, 3)
			if !d.Null() { // null is the zero time, as metav1.Time reads it
				c.LastTransitionTime = d.time()
			}
		default:
			d.Skip()
		}
	})
}

// word reads a string that recurs across the page (a condition's type, status or reason): a page's
// few distinct ones are compared in turn, which costs less than a string for each.
func (d *pageScanner) word(words *[]string) string {
	b := d.Str()
	for _, w := range *words {
		if w == string(b) {
			return w
		}
	}
	w := string(b)
	if len(*words) < 16 {
		*words = append(*words, w)
	}
	return w
}

// time reads a metav1.Time as its UnmarshalJSON does: an RFC 3339 string, in local time.
func (d *pageScanner) time() metav1.Time {
	b := d.Str()
	if d.Bad {
		return metav1.Time{}
	}
	if string(b) == d.lastTimeText && d.lastTimeText != "" {
		return d.lastTime
	}
	text := string(b)
	t, err := time.Parse(time.RFC3339, text)
	if err != nil {
		d.Fail()
		return metav1.Time{}
	}
	d.lastTime, d.lastTimeText = metav1.Time{Time: t.Local()}, text
	return d.lastTime
}
