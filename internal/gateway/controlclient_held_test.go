package gateway

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	controlv1 "github.com/execplane/execplane/proto/control/v1"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// A waiting Attach is held by the controller on purpose: its attempts are abandoned that
// much later (bounded by the API's 30 s), every other call as before.
func TestHeldFor(t *testing.T) {
	attach := func(d *durationpb.Duration) any {
		return &controlv1.AttachRequest{Request: &executionv1.AttachEnvironmentRequest{WaitReady: d}}
	}
	for name, c := range map[string]struct {
		req  any
		want time.Duration
	}{
		"not an attach":         {&controlv1.EnsureRequest{}, 0},
		"an attach that waits":  {attach(durationpb.New(20 * time.Second)), 20 * time.Second},
		"an attach at once":     {attach(nil), 0},
		"a negative wait":       {attach(durationpb.New(-time.Second)), 0},
		"a wait over the bound": {attach(durationpb.New(time.Hour)), maxHeld},
	} {
		if got := heldFor(c.req); got != c.want {
			t.Errorf("%s: held for %s, want %s", name, got, c.want)
		}
	}
}
