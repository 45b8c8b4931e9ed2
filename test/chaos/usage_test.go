package chaos_test

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ledger "github.com/execplane/execplane/internal/usage"
	"github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
)

// usageProblems checks every usage ledger the run left, as written: the sum of its hourly
// windows equals its totals for every additive counter (nothing was pruned in a run this
// short), and at least one ledger counted the run's file writes. A fold that counted a
// sample or report twice in one place and once in the other, or lost a piece splitting it
// across hours, breaks the sum.
func usageProblems(t *testing.T, sys *system) []string {
	t.Helper()
	cs, err := versioned.NewForConfig(sys.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	list, err := cs.ExecutionV1alpha1().ExecutionUsages(sys.ExecutorNamespace()).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		return []string{fmt.Sprintf("listing the ledgers: %v", err)}
	}
	var problems []string
	var bytesIn int64
	for _, u := range list.Items {
		var sum v1alpha1.UsageCounters
		for _, w := range u.Status.Windows {
			ledger.AddCounters(&sum, w.UsageCounters)
		}
		want := u.Status.Totals
		sum.MemoryPeakBytes, want.MemoryPeakBytes = 0, 0 // a maximum, not a sum
		if sum != want {
			problems = append(problems, fmt.Sprintf("%s: windows sum to %+v, totals are %+v", u.Name, sum, want))
		}
		bytesIn += u.Status.Totals.BytesIn
	}
	if len(list.Items) > 0 && bytesIn == 0 {
		problems = append(problems, "no ledger counted a byte written")
	}
	return problems
}
