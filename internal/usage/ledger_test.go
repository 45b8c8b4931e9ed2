package usage

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
)

const (
	ledgerKiB = int64(1) << 10
	ledgerMiB = int64(1) << 20
	ledgerGiB = int64(1) << 30
	// ledgerGiBKiBPerSecond is one GiB held for one second, in KiB-seconds.
	ledgerGiBKiBPerSecond = ledgerGiB / ledgerKiB
)

// ledgerT0 is two seconds before an hour boundary, so short spans cross it.
var ledgerT0 = time.Date(2026, 12, 5, 10, 59, 58, 0, time.UTC)

// ledgerHour is the hour h:00 of ledgerT0's day.
func ledgerHour(h int) time.Time { return time.Date(2026, 12, 5, h, 0, 0, 0, time.UTC) }

// ledgerAt is h:m:s of ledgerT0's day.
func ledgerAt(h, m, s int) time.Time { return time.Date(2026, 12, 5, h, m, s, 0, time.UTC) }

func ledgerWindow(start time.Time, c executionv1alpha1.UsageCounters) executionv1alpha1.UsageWindow {
	return executionv1alpha1.UsageWindow{Start: metav1.NewTime(start), UsageCounters: c}
}

// ledgerHours is n consecutive windows from first, each with c.
func ledgerHours(first time.Time, n int, c executionv1alpha1.UsageCounters) []executionv1alpha1.UsageWindow {
	var ws []executionv1alpha1.UsageWindow
	for i := range n {
		ws = append(ws, ledgerWindow(first.Add(time.Duration(i)*time.Hour), c))
	}
	return ws
}

func ledgerPod(name string, cpu, ws int64, at time.Time) PodSample {
	return PodSample{Name: name, UID: types.UID("uid-" + name), CPU: cpu, WorkingSet: ws, At: at}
}

func ledgerPodState(name string, cpu, ws int64, at time.Time) executionv1alpha1.UsagePod {
	return executionv1alpha1.UsagePod{Name: name, UID: types.UID("uid-" + name), CPUNanoseconds: cpu, WorkingSetBytes: ws,
		SampledAt: metav1.NewMicroTime(at)}
}

func ledgerReport(id string, commands, in, out int64, at time.Time) SeriesReport {
	return SeriesReport{ID: id, Commands: commands, BytesIn: in, BytesOut: out, At: at}
}

func ledgerSeriesState(id string, commands, in, out int64, at time.Time) executionv1alpha1.UsageSeries {
	return executionv1alpha1.UsageSeries{ID: id, Commands: commands, BytesIn: in, BytesOut: out, ReportedAt: metav1.NewTime(at)}
}

func ledgerEarlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func ledgerLater(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// ledgerWindowSum is the sum of the windows (the peak: the largest).
func ledgerWindowSum(ws []executionv1alpha1.UsageWindow) executionv1alpha1.UsageCounters {
	var sum executionv1alpha1.UsageCounters
	for _, w := range ws {
		AddCounters(&sum, w.UsageCounters)
	}
	return sum
}

func TestLedgerFoldPod(t *testing.T) {
	type counters = executionv1alpha1.UsageCounters
	for _, tc := range []struct {
		name    string
		samples []PodSample
		want    executionv1alpha1.ExecutionUsageStatus
	}{
		{
			name:    "a first sample counts the CPU from zero and sets the peak",
			samples: []PodSample{ledgerPod("a", 42e9, 300*ledgerMiB, ledgerT0)},
			want: executionv1alpha1.ExecutionUsageStatus{
				Totals:  counters{CPUNanoseconds: 42e9, MemoryPeakBytes: 300 * ledgerMiB},
				Windows: []executionv1alpha1.UsageWindow{ledgerWindow(ledgerHour(10), counters{CPUNanoseconds: 42e9, MemoryPeakBytes: 300 * ledgerMiB})},
				Pods:    []executionv1alpha1.UsagePod{ledgerPodState("a", 42e9, 300*ledgerMiB, ledgerT0)},
			},
		},
		{
			// 100 MiB held for ~11 s: 0.5×100 MiB×1 s + 100 MiB×10 s + 0.5×100 MiB×1 s = 1100 MiB·s,
			// the hour boundary two seconds after the first sample.
			name: "the memory area is the trapezoid between samples, across an hour",
			samples: []PodSample{
				ledgerPod("a", 0, 0, ledgerT0),
				ledgerPod("a", 1e9, 100*ledgerMiB, ledgerT0.Add(time.Second)),
				ledgerPod("a", 3e9, 100*ledgerMiB, ledgerT0.Add(11*time.Second)),
				ledgerPod("a", 3.5e9, 0, ledgerT0.Add(12*time.Second)),
			},
			want: executionv1alpha1.ExecutionUsageStatus{
				Totals: counters{CPUNanoseconds: 3.5e9, MemoryKiBSeconds: 1_126_400, MemoryPeakBytes: 100 * ledgerMiB},
				Windows: []executionv1alpha1.UsageWindow{
					// 10:59:58–59 (50 MiB·s, 1e9 ns) and 1 s of the 10 s at 100 MiB (2e9 ns over 10 s).
					ledgerWindow(ledgerHour(10), counters{CPUNanoseconds: 1.2e9, MemoryKiBSeconds: 51_200 + 102_400, MemoryPeakBytes: 100 * ledgerMiB}),
					ledgerWindow(ledgerHour(11), counters{CPUNanoseconds: 2.3e9, MemoryKiBSeconds: 921_600 + 51_200, MemoryPeakBytes: 100 * ledgerMiB}),
				},
				Pods: []executionv1alpha1.UsagePod{ledgerPodState("a", 3.5e9, 0, ledgerT0.Add(12*time.Second))},
			},
		},
		{
			name: "a repeated sample adds nothing",
			samples: []PodSample{
				ledgerPod("a", 1e9, ledgerMiB, ledgerAt(10, 30, 0)),
				ledgerPod("a", 2e9, ledgerMiB, ledgerAt(10, 30, 10)),
				ledgerPod("a", 2e9, ledgerMiB, ledgerAt(10, 30, 10)),
			},
			want: executionv1alpha1.ExecutionUsageStatus{
				Totals:  counters{CPUNanoseconds: 2e9, MemoryKiBSeconds: 10 * 1024, MemoryPeakBytes: ledgerMiB},
				Windows: []executionv1alpha1.UsageWindow{ledgerWindow(ledgerHour(10), counters{CPUNanoseconds: 2e9, MemoryKiBSeconds: 10 * 1024, MemoryPeakBytes: ledgerMiB})},
				Pods:    []executionv1alpha1.UsagePod{ledgerPodState("a", 2e9, ledgerMiB, ledgerAt(10, 30, 10))},
			},
		},
		{
			// The older sample's larger counter and working set would show in CPU, area and peak.
			name: "an older sample adds nothing, not even its peak",
			samples: []PodSample{
				ledgerPod("a", 1e9, ledgerMiB, ledgerAt(10, 30, 0)),
				ledgerPod("a", 3e9, ledgerMiB, ledgerAt(10, 30, 20)),
				ledgerPod("a", 9e9, 8*ledgerMiB, ledgerAt(10, 30, 10)),
			},
			want: executionv1alpha1.ExecutionUsageStatus{
				Totals:  counters{CPUNanoseconds: 3e9, MemoryKiBSeconds: 20 * 1024, MemoryPeakBytes: ledgerMiB},
				Windows: []executionv1alpha1.UsageWindow{ledgerWindow(ledgerHour(10), counters{CPUNanoseconds: 3e9, MemoryKiBSeconds: 20 * 1024, MemoryPeakBytes: ledgerMiB})},
				Pods:    []executionv1alpha1.UsagePod{ledgerPodState("a", 3e9, ledgerMiB, ledgerAt(10, 30, 20))},
			},
		},
		{
			name: "a sample at the instant of the last adds nothing, even with other counters",
			samples: []PodSample{
				ledgerPod("a", 1e9, ledgerMiB, ledgerAt(10, 30, 0)),
				ledgerPod("a", 2e9, ledgerMiB, ledgerAt(10, 30, 10)),
				ledgerPod("a", 5e9, 9*ledgerMiB, ledgerAt(10, 30, 10)),
			},
			want: executionv1alpha1.ExecutionUsageStatus{
				Totals:  counters{CPUNanoseconds: 2e9, MemoryKiBSeconds: 10 * 1024, MemoryPeakBytes: ledgerMiB},
				Windows: []executionv1alpha1.UsageWindow{ledgerWindow(ledgerHour(10), counters{CPUNanoseconds: 2e9, MemoryKiBSeconds: 10 * 1024, MemoryPeakBytes: ledgerMiB})},
				Pods:    []executionv1alpha1.UsagePod{ledgerPodState("a", 2e9, ledgerMiB, ledgerAt(10, 30, 10))},
			},
		},
		{
			name: "a counter that goes down adds nothing and is the new base",
			samples: []PodSample{
				ledgerPod("a", 10e9, ledgerMiB, ledgerAt(10, 30, 0)),
				ledgerPod("a", 4e9, ledgerMiB, ledgerAt(10, 30, 10)),
				ledgerPod("a", 6e9, ledgerMiB, ledgerAt(10, 30, 20)),
			},
			want: executionv1alpha1.ExecutionUsageStatus{
				Totals:  counters{CPUNanoseconds: 12e9, MemoryKiBSeconds: 20 * 1024, MemoryPeakBytes: ledgerMiB},
				Windows: []executionv1alpha1.UsageWindow{ledgerWindow(ledgerHour(10), counters{CPUNanoseconds: 12e9, MemoryKiBSeconds: 20 * 1024, MemoryPeakBytes: ledgerMiB})},
				Pods:    []executionv1alpha1.UsagePod{ledgerPodState("a", 6e9, ledgerMiB, ledgerAt(10, 30, 20))},
			},
		},
		{
			// 105 minutes: 30 in the 10:00 hour, 60 in the 11:00 hour, 15 in the 12:00 hour; 2 MiB on
			// average over 6300 s is 12,902,400 KiB·s.
			name: "a span over hours is split by time, the peak goes to the hour of the sample",
			samples: []PodSample{
				ledgerPod("a", 0, ledgerMiB, ledgerAt(10, 30, 0)),
				ledgerPod("a", 7e9, 3*ledgerMiB, ledgerAt(12, 15, 0)),
			},
			want: executionv1alpha1.ExecutionUsageStatus{
				Totals: counters{CPUNanoseconds: 7e9, MemoryKiBSeconds: 12_902_400, MemoryPeakBytes: 3 * ledgerMiB},
				Windows: []executionv1alpha1.UsageWindow{
					ledgerWindow(ledgerHour(10), counters{CPUNanoseconds: 2e9, MemoryKiBSeconds: 3_686_400, MemoryPeakBytes: ledgerMiB}),
					ledgerWindow(ledgerHour(11), counters{CPUNanoseconds: 4e9, MemoryKiBSeconds: 7_372_800}),
					ledgerWindow(ledgerHour(12), counters{CPUNanoseconds: 1e9, MemoryKiBSeconds: 1_843_200, MemoryPeakBytes: 3 * ledgerMiB}),
				},
				Pods: []executionv1alpha1.UsagePod{ledgerPodState("a", 7e9, 3*ledgerMiB, ledgerAt(12, 15, 0))},
			},
		},
		{
			name: "two pods are folded apart",
			samples: []PodSample{
				ledgerPod("a", 1e9, ledgerMiB, ledgerAt(10, 30, 0)),
				ledgerPod("b", 5e9, 4*ledgerMiB, ledgerAt(10, 30, 5)),
				ledgerPod("a", 2e9, ledgerMiB, ledgerAt(10, 30, 10)),
				ledgerPod("b", 6e9, 2*ledgerMiB, ledgerAt(10, 30, 15)),
			},
			want: executionv1alpha1.ExecutionUsageStatus{
				// a: 1e9 + 1e9, 1 MiB × 10 s; b: 5e9 + 1e9, 3 MiB × 10 s.
				Totals:  counters{CPUNanoseconds: 8e9, MemoryKiBSeconds: 10*1024 + 30*1024, MemoryPeakBytes: 4 * ledgerMiB},
				Windows: []executionv1alpha1.UsageWindow{ledgerWindow(ledgerHour(10), counters{CPUNanoseconds: 8e9, MemoryKiBSeconds: 40 * 1024, MemoryPeakBytes: 4 * ledgerMiB})},
				Pods: []executionv1alpha1.UsagePod{
					ledgerPodState("a", 2e9, ledgerMiB, ledgerAt(10, 30, 10)),
					ledgerPodState("b", 6e9, 2*ledgerMiB, ledgerAt(10, 30, 15)),
				},
			},
		},
		{
			name:    "a first sample's negative counters count as zero",
			samples: []PodSample{ledgerPod("a", -5, -7, ledgerT0)},
			want: executionv1alpha1.ExecutionUsageStatus{
				Pods: []executionv1alpha1.UsagePod{ledgerPodState("a", 0, 0, ledgerT0)},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got executionv1alpha1.ExecutionUsageStatus
			l := Ledger{Status: &got, Retention: ledgerRetention}
			for _, s := range tc.samples {
				l.FoldPod(s)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("status after folding (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLedgerFoldPodSpreadsExactly checks that a span's CPU and memory area are split over its
// hours so that the windows sum exactly to the totals, and that each hour gets its share of
// the span: no window counter is negative or off its proportional share by a unit or more.
func TestLedgerFoldPodSpreadsExactly(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to time.Time
		cpu, ws  int64
	}{
		{name: "ten seconds across an hour", from: ledgerT0, to: ledgerT0.Add(10 * time.Second), cpu: 1e9 + 1, ws: 100*ledgerMiB + 1},
		{name: "an odd count over three uneven hours", from: ledgerAt(10, 20, 0), to: ledgerAt(12, 10, 0), cpu: 1e9 + 2, ws: 7*ledgerMiB + 3},
		{name: "three days", from: ledgerT0, to: ledgerT0.Add(72*time.Hour + time.Second), cpu: 123_456_789_012_345, ws: 123*ledgerMiB + 5},
		// The rounded shares of the first nine hours (0.7 → 1 each) exceed the whole: the tenth
		// hour gets the remainder, −2.
		{name: "seven nanoseconds over ten hours", from: ledgerHour(10), to: ledgerHour(20), cpu: 7},
		// 24, 60 and 60 minutes and 1 ns: the first three shares round up (x.83, x.58, x.58), so
		// the last hour's remainder is −1 ns, with a realistic 12 s of CPU.
		{name: "a span ending a nanosecond past the hour", from: ledgerAt(10, 36, 0), to: ledgerHour(13).Add(time.Nanosecond), cpu: 12_000_000_011},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st executionv1alpha1.ExecutionUsageStatus
			l := Ledger{Status: &st, Retention: ledgerRetention}
			l.FoldPod(ledgerPod("a", 0, tc.ws, tc.from))
			l.FoldPod(ledgerPod("a", tc.cpu, tc.ws, tc.to))

			sum := ledgerWindowSum(st.Windows)
			if diff := cmp.Diff(st.Totals, sum); diff != "" {
				t.Errorf("the windows' sum is not the totals (-totals +sum):\n%s", diff)
			}
			if st.Totals.CPUNanoseconds != tc.cpu {
				t.Errorf("total CPU = %d, want %d", st.Totals.CPUNanoseconds, tc.cpu)
			}
			span := tc.to.Sub(tc.from)
			for _, w := range st.Windows {
				start := w.Start.Time
				overlap := ledgerEarlier(tc.to, start.Add(time.Hour)).Sub(ledgerLater(tc.from, start))
				share := float64(overlap) / float64(span)
				for _, c := range []struct {
					name       string
					got, whole int64
				}{
					{"CPU", w.CPUNanoseconds, st.Totals.CPUNanoseconds},
					{"memory area", w.MemoryKiBSeconds, st.Totals.MemoryKiBSeconds},
				} {
					exact := float64(c.whole) * share
					if c.got < 0 || math.Abs(float64(c.got)-exact) >= 1 {
						t.Errorf("window %s: %s = %d, want its share of %d, %.3f, rounded (never negative)",
							start.Format(time.RFC3339), c.name, c.got, c.whole, exact)
					}
				}
			}
		})
	}
}

func TestLedgerFoldIsIdempotent(t *testing.T) {
	samples := []PodSample{
		ledgerPod("a", 0, 0, ledgerT0),
		ledgerPod("a", 1e9, 100*ledgerMiB, ledgerT0.Add(time.Second)),
		ledgerPod("b", 7e9, 50*ledgerMiB, ledgerT0.Add(2*time.Second)),
		ledgerPod("a", 3e9, 100*ledgerMiB, ledgerT0.Add(11*time.Second)),
		ledgerPod("a", 2e9, 30*ledgerMiB, ledgerT0.Add(20*time.Second)), // the counter went down
		ledgerPod("b", 9e9, 70*ledgerMiB, ledgerT0.Add(95*time.Minute)),
		ledgerPod("a", 5e9, 0, ledgerT0.Add(3*time.Hour)),
	}
	reports := []SeriesReport{
		ledgerReport("gw-1", 1, 10, 100, ledgerT0),
		ledgerReport("gw-2", 4, 40, 400, ledgerT0.Add(time.Second)),
		ledgerReport("gw-1", 3, 30, 300, ledgerT0.Add(5*time.Second)),
		ledgerReport("gw-2", 9, 90, 900, ledgerT0.Add(90*time.Minute)),
		ledgerReport("gw-1", 8, 80, 800, ledgerT0.Add(100*time.Minute)),
	}
	foldInOrder := func(l Ledger) {
		for _, s := range samples {
			l.FoldPod(s)
		}
		for _, r := range reports {
			l.FoldSeries(r)
		}
	}
	var want executionv1alpha1.ExecutionUsageStatus
	foldInOrder(Ledger{Status: &want, Retention: ledgerRetention})

	for _, tc := range []struct {
		name  string
		again func(l Ledger, rng *rand.Rand)
	}{
		{name: "the same sequence again", again: func(l Ledger, _ *rand.Rand) { foldInOrder(l) }},
		{
			name: "each sample and report again, shuffled, some more than once",
			again: func(l Ledger, rng *rand.Rand) {
				var ops []func()
				for _, s := range samples {
					for range 1 + rng.IntN(3) {
						ops = append(ops, func() { l.FoldPod(s) })
					}
				}
				for _, r := range reports {
					for range 1 + rng.IntN(3) {
						ops = append(ops, func() { l.FoldSeries(r) })
					}
				}
				rng.Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
				for _, op := range ops {
					op()
				}
			},
		},
		{
			name: "the last sample and report of each source again",
			again: func(l Ledger, _ *rand.Rand) {
				l.FoldPod(samples[len(samples)-1])
				l.FoldPod(samples[len(samples)-2])
				l.FoldSeries(reports[len(reports)-1])
				l.FoldSeries(reports[len(reports)-2])
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got executionv1alpha1.ExecutionUsageStatus
			l := Ledger{Status: &got, Retention: ledgerRetention}
			foldInOrder(l)
			tc.again(l, rand.New(rand.NewPCG(7, 11)))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("status after folding again (-once +again):\n%s", diff)
			}
		})
	}
}

func TestLedgerFoldPodKeepsTheMostRecentPods(t *testing.T) {
	at := func(s int) time.Time { return ledgerAt(10, 30, s) }
	for _, tc := range []struct {
		name     string
		samples  []PodSample
		wantPods []executionv1alpha1.UsagePod
		wantCPU  int64
	}{
		{
			name: "a fifth pod drops the least recently sampled",
			samples: []PodSample{
				ledgerPod("a", 1e9, 0, at(0)), ledgerPod("b", 1e9, 0, at(1)), ledgerPod("c", 1e9, 0, at(2)),
				ledgerPod("d", 1e9, 0, at(3)), ledgerPod("a", 2e9, 0, at(4)), ledgerPod("e", 1e9, 0, at(5)),
			},
			wantPods: []executionv1alpha1.UsagePod{
				ledgerPodState("c", 1e9, 0, at(2)), ledgerPodState("d", 1e9, 0, at(3)),
				ledgerPodState("a", 2e9, 0, at(4)), ledgerPodState("e", 1e9, 0, at(5)),
			},
			wantCPU: 6e9,
		},
		{
			name: "a new pod sampled before all the remembered ones is neither remembered nor counted",
			samples: []PodSample{
				ledgerPod("a", 1e9, 0, at(10)), ledgerPod("b", 1e9, 0, at(11)), ledgerPod("c", 1e9, 0, at(12)),
				ledgerPod("d", 1e9, 0, at(13)), ledgerPod("e", 5e9, 0, at(0)),
			},
			wantPods: []executionv1alpha1.UsagePod{
				ledgerPodState("a", 1e9, 0, at(10)), ledgerPodState("b", 1e9, 0, at(11)),
				ledgerPodState("c", 1e9, 0, at(12)), ledgerPodState("d", 1e9, 0, at(13)),
			},
			wantCPU: 4e9, // it could not be remembered, so counting it could count it again

		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st executionv1alpha1.ExecutionUsageStatus
			l := Ledger{Status: &st, Retention: ledgerRetention}
			for _, s := range tc.samples {
				l.FoldPod(s)
			}
			if diff := cmp.Diff(tc.wantPods, st.Pods); diff != "" {
				t.Errorf("remembered pods (-want +got):\n%s", diff)
			}
			if st.Totals.CPUNanoseconds != tc.wantCPU {
				t.Errorf("total CPU = %d, want %d (every remembered pod's)", st.Totals.CPUNanoseconds, tc.wantCPU)
			}
		})
	}
}

// TestLedgerFoldPastTheBoundsIsIdempotent folds, twice, the first sample or report of a
// source older than all those the ledger remembers while it is full: the ledger could not
// remember it, so it never counts it (a loss bounded by the bounds, never a double count).
func TestLedgerFoldPastTheBoundsIsIdempotent(t *testing.T) {
	for _, tc := range []struct {
		name         string
		fill         func(l Ledger)
		late         func(l Ledger)
		count        func(c executionv1alpha1.UsageCounters) int64
		wantAfterOne int64
	}{
		{
			name: "a pod's sample",
			fill: func(l Ledger) {
				for i := range executionv1alpha1.MaxUsagePods {
					l.FoldPod(ledgerPod(fmt.Sprintf("x%d", i), 1e9, 0, ledgerAt(10, 30, 10+i)))
				}
			},
			late:         func(l Ledger) { l.FoldPod(ledgerPod("e", 5e9, 0, ledgerAt(10, 30, 0))) },
			count:        func(c executionv1alpha1.UsageCounters) int64 { return c.CPUNanoseconds },
			wantAfterOne: executionv1alpha1.MaxUsagePods * 1e9,
		},
		{
			name: "a gateway series' report",
			fill: func(l Ledger) {
				for i := range executionv1alpha1.MaxUsageSeries {
					l.FoldSeries(ledgerReport(fmt.Sprintf("gw-%02d", i), 1, 0, 0, ledgerAt(10, 31, i)))
				}
			},
			late:         func(l Ledger) { l.FoldSeries(ledgerReport("gw-late", 7, 0, 0, ledgerAt(10, 30, 0))) },
			count:        func(c executionv1alpha1.UsageCounters) int64 { return c.Commands },
			wantAfterOne: executionv1alpha1.MaxUsageSeries,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st executionv1alpha1.ExecutionUsageStatus
			l := Ledger{Status: &st, Retention: ledgerRetention}
			tc.fill(l)
			tc.late(l)
			if got := tc.count(st.Totals); got != tc.wantAfterOne {
				t.Fatalf("total after the first fold = %d, want %d", got, tc.wantAfterOne)
			}
			tc.late(l)
			if got := tc.count(st.Totals); got != tc.wantAfterOne {
				t.Errorf("total after folding the same sample again = %d, want %d (counted twice)", got, tc.wantAfterOne)
			}
		})
	}
}

func TestLedgerFoldSeries(t *testing.T) {
	type counters = executionv1alpha1.UsageCounters
	a1 := ledgerReport("gw-a", 3, 100, 1000, ledgerT0)
	a2 := ledgerReport("gw-a", 5, 150, 3000, ledgerT0.Add(5*time.Second))
	afterA2 := executionv1alpha1.ExecutionUsageStatus{
		Totals: counters{Commands: 5, BytesIn: 150, BytesOut: 3000},
		Windows: []executionv1alpha1.UsageWindow{
			ledgerWindow(ledgerHour(10), counters{Commands: 3, BytesIn: 100, BytesOut: 1000}),
			ledgerWindow(ledgerHour(11), counters{Commands: 2, BytesIn: 50, BytesOut: 2000}),
		},
		Series: []executionv1alpha1.UsageSeries{ledgerSeriesState("gw-a", 5, 150, 3000, ledgerT0.Add(5*time.Second))},
	}
	for _, tc := range []struct {
		name    string
		reports []SeriesReport
		want    executionv1alpha1.ExecutionUsageStatus
	}{
		{
			name:    "cumulative reports add their increase in the hour of the report",
			reports: []SeriesReport{a1, a2},
			want:    afterA2,
		},
		{
			name:    "a repeated report adds nothing",
			reports: []SeriesReport{a1, a2, a2},
			want:    afterA2,
		},
		{
			name:    "an older report adds nothing and keeps the last report's time",
			reports: []SeriesReport{a1, a2, a1},
			want:    afterA2,
		},
		{
			name: "two series add up",
			reports: []SeriesReport{
				ledgerReport("gw-a", 3, 0, 0, ledgerT0),
				ledgerReport("gw-b", 4, 0, 0, ledgerT0.Add(time.Second)),
				ledgerReport("gw-a", 5, 0, 0, ledgerT0.Add(5*time.Second)),
				ledgerReport("gw-b", 10, 0, 0, ledgerT0.Add(6*time.Second)),
			},
			want: executionv1alpha1.ExecutionUsageStatus{
				Totals: counters{Commands: 15},
				Windows: []executionv1alpha1.UsageWindow{
					ledgerWindow(ledgerHour(10), counters{Commands: 7}),
					ledgerWindow(ledgerHour(11), counters{Commands: 8}),
				},
				Series: []executionv1alpha1.UsageSeries{
					ledgerSeriesState("gw-a", 5, 0, 0, ledgerT0.Add(5*time.Second)),
					ledgerSeriesState("gw-b", 10, 0, 0, ledgerT0.Add(6*time.Second)),
				},
			},
		},
		{
			name:    "a report with nothing counted makes no window",
			reports: []SeriesReport{ledgerReport("gw-a", 0, 0, 0, ledgerT0)},
			want: executionv1alpha1.ExecutionUsageStatus{
				Series: []executionv1alpha1.UsageSeries{ledgerSeriesState("gw-a", 0, 0, 0, ledgerT0)},
			},
		},
		{
			name: "a series idle for more than two hours is forgotten",
			reports: []SeriesReport{
				ledgerReport("gw-a", 3, 0, 0, ledgerHour(10)),
				ledgerReport("gw-b", 4, 0, 0, ledgerHour(12).Add(time.Second)),
			},
			want: executionv1alpha1.ExecutionUsageStatus{
				Totals: counters{Commands: 7},
				Windows: []executionv1alpha1.UsageWindow{
					ledgerWindow(ledgerHour(10), counters{Commands: 3}),
					ledgerWindow(ledgerHour(12), counters{Commands: 4}),
				},
				Series: []executionv1alpha1.UsageSeries{ledgerSeriesState("gw-b", 4, 0, 0, ledgerHour(12).Add(time.Second))},
			},
		},
		{
			name: "a series idle for exactly two hours is remembered",
			reports: []SeriesReport{
				ledgerReport("gw-a", 3, 0, 0, ledgerHour(10)),
				ledgerReport("gw-b", 4, 0, 0, ledgerHour(12)),
			},
			want: executionv1alpha1.ExecutionUsageStatus{
				Totals: counters{Commands: 7},
				Windows: []executionv1alpha1.UsageWindow{
					ledgerWindow(ledgerHour(10), counters{Commands: 3}),
					ledgerWindow(ledgerHour(12), counters{Commands: 4}),
				},
				Series: []executionv1alpha1.UsageSeries{
					ledgerSeriesState("gw-a", 3, 0, 0, ledgerHour(10)),
					ledgerSeriesState("gw-b", 4, 0, 0, ledgerHour(12)),
				},
			},
		},
		{
			// The documented cost of forgetting: gateways stop reporting a series long before.
			name: "a report of a forgotten series counts again from zero",
			reports: []SeriesReport{
				ledgerReport("gw-a", 3, 0, 0, ledgerHour(10)),
				ledgerReport("gw-b", 4, 0, 0, ledgerHour(12).Add(time.Second)),
				ledgerReport("gw-a", 3, 0, 0, ledgerHour(12).Add(2*time.Second)),
			},
			want: executionv1alpha1.ExecutionUsageStatus{
				Totals: counters{Commands: 10},
				Windows: []executionv1alpha1.UsageWindow{
					ledgerWindow(ledgerHour(10), counters{Commands: 3}),
					ledgerWindow(ledgerHour(12), counters{Commands: 7}),
				},
				Series: []executionv1alpha1.UsageSeries{
					ledgerSeriesState("gw-b", 4, 0, 0, ledgerHour(12).Add(time.Second)),
					ledgerSeriesState("gw-a", 3, 0, 0, ledgerHour(12).Add(2*time.Second)),
				},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got executionv1alpha1.ExecutionUsageStatus
			l := Ledger{Status: &got, Retention: ledgerRetention}
			for _, r := range tc.reports {
				l.FoldSeries(r)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("status after folding (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLedgerFoldSeriesNeverEvictsALiveSeries: with every slot taken by series changed in
// the last two hours, a new series is not counted (and not remembered), and the live ones
// sent again add nothing — where evicting one would count it again from zero on its next
// copy. Once the oldest is idle past two hours, a new series takes its slot.
func TestLedgerFoldSeriesNeverEvictsALiveSeries(t *testing.T) {
	var st executionv1alpha1.ExecutionUsageStatus
	l := Ledger{Status: &st, Retention: ledgerRetention}
	max := executionv1alpha1.MaxUsageSeries
	for i := range max {
		l.FoldSeries(ledgerReport(fmt.Sprintf("gw-%02d", i), 2, 0, 0, ledgerAt(10, 30, i)))
	}
	l.FoldSeries(ledgerReport("gw-new", 5, 0, 0, ledgerAt(10, 40, 0)))
	for i := range max { // every gateway sends its series again, unchanged
		l.FoldSeries(ledgerReport(fmt.Sprintf("gw-%02d", i), 2, 0, 0, ledgerAt(10, 45, i)))
	}
	if got, want := st.Totals.Commands, int64(2*max); got != want {
		t.Errorf("total commands = %d, want %d (the live series once each, the one over the bound not at all)", got, want)
	}
	if len(st.Series) != max || slices.ContainsFunc(st.Series, func(s executionv1alpha1.UsageSeries) bool { return s.ID == "gw-new" }) {
		t.Errorf("%d series remembered (want %d, without gw-new)", len(st.Series), max)
	}
	// Two hours and more after gw-00's last change: it is forgotten, and the new series
	// takes its slot and counts.
	l.FoldSeries(ledgerReport("gw-later", 7, 0, 0, ledgerAt(12, 30, 1)))
	if got, want := st.Totals.Commands, int64(2*max+7); got != want {
		t.Errorf("total commands = %d, want %d", got, want)
	}
}

func TestLedgerAccrueAndTransition(t *testing.T) {
	type counters = executionv1alpha1.UsageCounters
	accrue := func(to time.Time) func(Ledger) { return func(l Ledger) { l.Accrue(to) } }
	transition := func(state executionv1alpha1.UsageState, storage int64, at time.Time) func(Ledger) {
		return func(l Ledger) { l.Transition(state, storage, at) }
	}
	accrual := func(state executionv1alpha1.UsageState, since time.Time, storage int64) executionv1alpha1.UsageAccrual {
		return executionv1alpha1.UsageAccrual{State: state, Since: metav1.NewMicroTime(since), StorageBytes: storage}
	}
	endedAt := func(at time.Time) *metav1.Time { t := metav1.NewTime(at); return &t }
	hour := time.Hour.Milliseconds()

	readyAcrossHour := executionv1alpha1.ExecutionUsageStatus{
		Totals: counters{ReadyMilliseconds: 5000, StorageKiBSeconds: 5 * ledgerGiBKiBPerSecond},
		Windows: []executionv1alpha1.UsageWindow{
			ledgerWindow(ledgerHour(10), counters{ReadyMilliseconds: 2000, StorageKiBSeconds: 2 * ledgerGiBKiBPerSecond}),
			ledgerWindow(ledgerHour(11), counters{ReadyMilliseconds: 3000, StorageKiBSeconds: 3 * ledgerGiBKiBPerSecond}),
		},
		Accrual: accrual(executionv1alpha1.UsageReady, ledgerT0.Add(5*time.Second), ledgerGiB),
	}
	// 2026-12-05 22:30 to 2026-12-07 01:15, suspended with a 10 GiB claim.
	suspendedFrom, suspendedTo := time.Date(2026, 12, 5, 22, 30, 0, 0, time.UTC), time.Date(2026, 12, 7, 1, 15, 0, 0, time.UTC)
	suspendedHour := counters{SuspendedMilliseconds: hour, StorageKiBSeconds: 10 * ledgerGiBKiBPerSecond * 3600}
	suspendedWindows := slices.Concat(
		[]executionv1alpha1.UsageWindow{ledgerWindow(time.Date(2026, 12, 5, 22, 0, 0, 0, time.UTC),
			counters{SuspendedMilliseconds: hour / 2, StorageKiBSeconds: 10 * ledgerGiBKiBPerSecond * 1800})},
		ledgerHours(time.Date(2026, 12, 5, 23, 0, 0, 0, time.UTC), 1+24+1, suspendedHour),
		[]executionv1alpha1.UsageWindow{ledgerWindow(time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC),
			counters{SuspendedMilliseconds: hour / 4, StorageKiBSeconds: 10 * ledgerGiBKiBPerSecond * 900})},
	)

	for _, tc := range []struct {
		name  string
		start executionv1alpha1.UsageAccrual
		ops   []func(Ledger)
		want  executionv1alpha1.ExecutionUsageStatus
	}{
		{
			name:  "ready time and storage across an hour",
			start: accrual(executionv1alpha1.UsageReady, ledgerT0, ledgerGiB),
			ops:   []func(Ledger){accrue(ledgerT0.Add(5 * time.Second))},
			want:  readyAcrossHour,
		},
		{
			name:  "accruing in pieces adds up to accruing at once",
			start: accrual(executionv1alpha1.UsageReady, ledgerT0, ledgerGiB),
			ops: []func(Ledger){
				accrue(ledgerT0.Add(500 * time.Millisecond)), accrue(ledgerT0.Add(2 * time.Second)),
				accrue(ledgerT0.Add(2 * time.Second)), accrue(ledgerT0.Add(3700 * time.Millisecond)),
				accrue(ledgerT0.Add(5 * time.Second)),
			},
			want: readyAcrossHour,
		},
		{
			name:  "suspended time and storage across days",
			start: accrual(executionv1alpha1.UsageSuspended, suspendedFrom, 10*ledgerGiB),
			ops:   []func(Ledger){accrue(suspendedTo)},
			want: executionv1alpha1.ExecutionUsageStatus{
				Totals:  ledgerWindowSum(suspendedWindows),
				Windows: suspendedWindows,
				Accrual: accrual(executionv1alpha1.UsageSuspended, suspendedTo, 10*ledgerGiB),
			},
		},
		{
			name:  "any other state accrues storage only",
			start: accrual(executionv1alpha1.UsageOther, ledgerHour(10), ledgerGiB),
			ops:   []func(Ledger){accrue(ledgerAt(10, 0, 10))},
			want: executionv1alpha1.ExecutionUsageStatus{
				Totals:  counters{StorageKiBSeconds: 10 * ledgerGiBKiBPerSecond},
				Windows: []executionv1alpha1.UsageWindow{ledgerWindow(ledgerHour(10), counters{StorageKiBSeconds: 10 * ledgerGiBKiBPerSecond})},
				Accrual: accrual(executionv1alpha1.UsageOther, ledgerAt(10, 0, 10), ledgerGiB),
			},
		},
		{
			name:  "transitions accrue each state for its time, then the end",
			start: accrual(executionv1alpha1.UsageOther, ledgerHour(10), 0),
			ops: []func(Ledger){
				transition(executionv1alpha1.UsageReady, ledgerGiB, ledgerAt(10, 0, 10)),
				transition(executionv1alpha1.UsageSuspended, 2*ledgerGiB, ledgerAt(10, 0, 30)),
				transition(executionv1alpha1.UsageEnded, 0, ledgerAt(10, 1, 0)),
			},
			want: executionv1alpha1.ExecutionUsageStatus{
				// ready 20 s with 1 GiB, suspended 30 s with 2 GiB.
				Totals: counters{ReadyMilliseconds: 20_000, SuspendedMilliseconds: 30_000, StorageKiBSeconds: 80 * ledgerGiBKiBPerSecond},
				Windows: []executionv1alpha1.UsageWindow{ledgerWindow(ledgerHour(10),
					counters{ReadyMilliseconds: 20_000, SuspendedMilliseconds: 30_000, StorageKiBSeconds: 80 * ledgerGiBKiBPerSecond})},
				Accrual: accrual(executionv1alpha1.UsageEnded, ledgerAt(10, 1, 0), 0),
				EndedAt: endedAt(ledgerAt(10, 1, 0)),
			},
		},
		{
			name:  "a transition before Since takes effect from Since, not before",
			start: accrual(executionv1alpha1.UsageReady, ledgerHour(10), ledgerGiB),
			ops: []func(Ledger){
				accrue(ledgerAt(10, 0, 30)),
				transition(executionv1alpha1.UsageSuspended, ledgerGiB, ledgerAt(10, 0, 10)),
				accrue(ledgerAt(10, 1, 0)),
			},
			want: executionv1alpha1.ExecutionUsageStatus{
				Totals: counters{ReadyMilliseconds: 30_000, SuspendedMilliseconds: 30_000, StorageKiBSeconds: 60 * ledgerGiBKiBPerSecond},
				Windows: []executionv1alpha1.UsageWindow{ledgerWindow(ledgerHour(10),
					counters{ReadyMilliseconds: 30_000, SuspendedMilliseconds: 30_000, StorageKiBSeconds: 60 * ledgerGiBKiBPerSecond})},
				Accrual: accrual(executionv1alpha1.UsageSuspended, ledgerAt(10, 1, 0), ledgerGiB),
			},
		},
		{
			name:  "an accrual to a time before Since adds nothing",
			start: accrual(executionv1alpha1.UsageReady, ledgerAt(10, 0, 30), ledgerGiB),
			ops:   []func(Ledger){accrue(ledgerAt(10, 0, 10)), accrue(ledgerAt(10, 0, 30))},
			want:  executionv1alpha1.ExecutionUsageStatus{Accrual: accrual(executionv1alpha1.UsageReady, ledgerAt(10, 0, 30), ledgerGiB)},
		},
		{
			name:  "an end before Since ends at Since",
			start: accrual(executionv1alpha1.UsageReady, ledgerAt(10, 0, 30), ledgerGiB),
			ops:   []func(Ledger){transition(executionv1alpha1.UsageEnded, 0, ledgerAt(10, 0, 10))},
			want: executionv1alpha1.ExecutionUsageStatus{
				Accrual: accrual(executionv1alpha1.UsageEnded, ledgerAt(10, 0, 30), 0),
				EndedAt: endedAt(ledgerAt(10, 0, 30)),
			},
		},
		{
			name:  "nothing accrues after the end, nor changes it",
			start: accrual(executionv1alpha1.UsageReady, ledgerHour(10), ledgerGiB),
			ops: []func(Ledger){
				transition(executionv1alpha1.UsageEnded, ledgerGiB, ledgerAt(10, 0, 10)),
				accrue(ledgerHour(12)),
				transition(executionv1alpha1.UsageReady, ledgerGiB, ledgerHour(13)),
				transition(executionv1alpha1.UsageEnded, 0, ledgerHour(14)),
				accrue(ledgerHour(15)),
			},
			want: executionv1alpha1.ExecutionUsageStatus{
				Totals:  counters{ReadyMilliseconds: 10_000, StorageKiBSeconds: 10 * ledgerGiBKiBPerSecond},
				Windows: []executionv1alpha1.UsageWindow{ledgerWindow(ledgerHour(10), counters{ReadyMilliseconds: 10_000, StorageKiBSeconds: 10 * ledgerGiBKiBPerSecond})},
				Accrual: accrual(executionv1alpha1.UsageEnded, ledgerAt(10, 0, 10), ledgerGiB),
				EndedAt: endedAt(ledgerAt(10, 0, 10)),
			},
		},
		{
			name:  "a negative claim size counts as none",
			start: accrual(executionv1alpha1.UsageOther, ledgerHour(10), 0),
			ops:   []func(Ledger){transition(executionv1alpha1.UsageReady, -ledgerGiB, ledgerHour(10)), accrue(ledgerAt(10, 0, 1))},
			want: executionv1alpha1.ExecutionUsageStatus{
				Totals:  counters{ReadyMilliseconds: 1000},
				Windows: []executionv1alpha1.UsageWindow{ledgerWindow(ledgerHour(10), counters{ReadyMilliseconds: 1000})},
				Accrual: accrual(executionv1alpha1.UsageReady, ledgerAt(10, 0, 1), 0),
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := executionv1alpha1.ExecutionUsageStatus{Accrual: tc.start}
			l := Ledger{Status: &got, Retention: ledgerRetention}
			for _, op := range tc.ops {
				op(l)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLedgerAccrueKeepsSubMilliseconds accrues ready time between instants that are not on a
// millisecond (the recorder accrues to its clock's now at every checkpoint): the ready time
// must be the accrued span's, however the span is cut by hours or by accruals.
func TestLedgerAccrueKeepsSubMilliseconds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		since time.Time
		to    []time.Time
	}{
		{
			name:  "one accrual over an hour boundary",
			since: ledgerHour(11).Add(-500 * time.Microsecond),
			to:    []time.Time{ledgerHour(11).Add(1500 * time.Microsecond)},
		},
		{
			name:  "ten accruals 1.0005 s apart",
			since: ledgerHour(10),
			to: func() []time.Time {
				var to []time.Time
				for i := 1; i <= 10; i++ {
					to = append(to, ledgerHour(10).Add(time.Duration(i)*1000500*time.Microsecond))
				}
				return to
			}(),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := executionv1alpha1.ExecutionUsageStatus{Accrual: executionv1alpha1.UsageAccrual{
				State: executionv1alpha1.UsageReady, Since: metav1.NewMicroTime(tc.since),
			}}
			l := Ledger{Status: &st, Retention: ledgerRetention}
			for _, to := range tc.to {
				l.Accrue(to)
			}
			want := tc.to[len(tc.to)-1].Sub(tc.since).Milliseconds()
			if got := st.Totals.ReadyMilliseconds; got != want {
				t.Errorf("ready time = %d ms, want %d ms (the span from %s to %s)", got, want,
					tc.since.Format(time.RFC3339Nano), tc.to[len(tc.to)-1].Format(time.RFC3339Nano))
			}
		})
	}
}

func TestLedgerPrune(t *testing.T) {
	type counters = executionv1alpha1.UsageCounters
	// hours are n windows from first, the i-th with i+1 commands.
	hours := func(first time.Time, n int) []executionv1alpha1.UsageWindow {
		var ws []executionv1alpha1.UsageWindow
		for i := range n {
			ws = append(ws, ledgerWindow(first.Add(time.Duration(i)*time.Hour), counters{Commands: int64(i + 1)}))
		}
		return ws
	}
	for _, tc := range []struct {
		name      string
		windows   []executionv1alpha1.UsageWindow
		retention time.Duration
		now       time.Time
		want      []executionv1alpha1.UsageWindow
	}{
		{
			name:    "windows that ended before now minus the retention are dropped",
			windows: hours(ledgerHour(10), 4), retention: 2 * time.Hour, now: ledgerAt(14, 30, 0),
			want: hours(ledgerHour(10), 4)[2:],
		},
		{
			name:    "a window that ended exactly at now minus the retention is kept",
			windows: hours(ledgerHour(10), 4), retention: 2 * time.Hour, now: ledgerHour(14),
			want: hours(ledgerHour(10), 4)[1:],
		},
		{
			name:    "windows within the retention are all kept",
			windows: hours(ledgerHour(10), 4), retention: DefaultRetention, now: ledgerHour(14),
			want: hours(ledgerHour(10), 4),
		},
		{
			name:    "every window is dropped long after",
			windows: hours(ledgerHour(10), 4), retention: 24 * time.Hour, now: ledgerHour(10).Add(72 * time.Hour),
			want: nil,
		},
		{
			name:    "at most MaxUsageWindows, the newest",
			windows: hours(ledgerHour(10), executionv1alpha1.MaxUsageWindows+60), retention: 100 * 24 * time.Hour,
			now:  ledgerHour(10).Add(time.Duration(executionv1alpha1.MaxUsageWindows+60) * time.Hour),
			want: hours(ledgerHour(10), executionv1alpha1.MaxUsageWindows+60)[60:],
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			totals := ledgerWindowSum(tc.windows)
			st := executionv1alpha1.ExecutionUsageStatus{Totals: totals, Windows: tc.windows}
			Ledger{Status: &st, Retention: tc.retention}.Prune(tc.now)
			if diff := cmp.Diff(tc.want, st.Windows, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("windows after pruning (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(totals, st.Totals); diff != "" {
				t.Errorf("totals changed by pruning (-before +after):\n%s", diff)
			}
		})
	}
}

// ledgerEvent is one observation of the property test: a pod sample, a series report or a
// lifecycle transition.
type ledgerEvent struct {
	at      time.Time
	pod     *PodSample
	report  *SeriesReport
	state   executionv1alpha1.UsageState
	storage int64
}

func (e ledgerEvent) fold(l Ledger) {
	switch {
	case e.pod != nil:
		l.FoldPod(*e.pod)
	case e.report != nil:
		l.FoldSeries(*e.report)
	default:
		l.Transition(e.state, e.storage, e.at)
	}
}

// ledgerEvents is a random history of three days from start: three executor pods in turn
// (monotonic CPU, random working sets, gaps from a second to three hours), three gateway
// series (gaps under the two hours after which a series is forgotten, unchanged copies
// within 30 minutes of a change) and random transitions
// ending with the environment's end an hour before the last day is over. Times are on the
// second and claims a multiple of a MiB, so that time-based counters are exact (see
// TestLedgerAccrueKeepsSubMilliseconds for instants between milliseconds).
func ledgerEvents(rng *rand.Rand, start time.Time) []ledgerEvent {
	end := start.Add(72 * time.Hour)
	seconds := func(lo, hi int) time.Duration { return ledgerSeconds(rng, lo, hi) }
	var events []ledgerEvent
	for i, name := range []string{"x0", "x1", "x2"} {
		from, to := start.Add(time.Duration(i)*24*time.Hour), start.Add(time.Duration(i+1)*24*time.Hour+10*time.Minute)
		var cpu int64
		for at := from.Add(seconds(0, 60)); at.Before(to); {
			cpu += rng.Int64N(2e9) * int64(rng.IntN(120))
			s := ledgerPod(name, cpu, rng.Int64N(2*ledgerGiB), at)
			events = append(events, ledgerEvent{at: at, pod: &s})
			gap := seconds(1, 900)
			if rng.IntN(25) == 0 {
				gap = seconds(1, 3*3600)
			}
			at = at.Add(gap)
		}
	}
	for i, id := range []string{"gw-a", "gw-b", "gw-c"} {
		var r SeriesReport
		r.ID = id
		var changed time.Time
		for at := start.Add(time.Duration(i) * 20 * time.Hour).Add(seconds(0, 600)); at.Before(end); at = at.Add(seconds(1, 90*60)) {
			r.At = at
			// As gateways do: a series is sent again unchanged only within 30 minutes of
			// its last change.
			if rng.IntN(4) > 0 || changed.IsZero() || at.Sub(changed) > 30*time.Minute {
				changed = at
				r.Commands += rng.Int64N(50)
				r.BytesIn += rng.Int64N(1 << 20)
				r.BytesOut += rng.Int64N(1 << 24)
			}
			rep := r
			events = append(events, ledgerEvent{at: at, report: &rep})
		}
	}
	states := []executionv1alpha1.UsageState{executionv1alpha1.UsageReady, executionv1alpha1.UsageSuspended, executionv1alpha1.UsageOther}
	claims := []int64{0, 512 * ledgerMiB, ledgerGiB, 10 * ledgerGiB, 3*ledgerGiB + 7*ledgerMiB}
	for at := start.Add(seconds(1, 600)); at.Before(end.Add(-time.Hour)); at = at.Add(seconds(1, 6*3600)) {
		events = append(events, ledgerEvent{at: at, state: states[rng.IntN(len(states))], storage: claims[rng.IntN(len(claims))]})
	}
	events = append(events, ledgerEvent{at: end.Add(-time.Hour), state: executionv1alpha1.UsageEnded})
	slices.SortStableFunc(events, func(a, b ledgerEvent) int { return a.at.Compare(b.at) })
	return events
}

// ledgerOracle computes from the events alone what a ledger must hold: the totals, and the
// hourly windows of the counters that are exact (time-based ones and the gateways' counts).
func ledgerOracle(events []ledgerEvent, start, end time.Time) (executionv1alpha1.UsageCounters, map[int64]executionv1alpha1.UsageCounters, float64) {
	var totals executionv1alpha1.UsageCounters
	windows := map[int64]executionv1alpha1.UsageCounters{}
	addTo := func(at time.Time, c executionv1alpha1.UsageCounters) {
		h := at.Truncate(time.Hour).Unix()
		w := windows[h]
		AddCounters(&w, c)
		windows[h] = w
	}
	lastPod := map[types.UID]PodSample{}
	lastSeries := map[string]SeriesReport{}
	var area float64
	state, storage, since := executionv1alpha1.UsageOther, int64(0), start
	accrueUntil := func(to time.Time) {
		if state == executionv1alpha1.UsageEnded {
			return
		}
		for h := since.Truncate(time.Hour); h.Before(to); h = h.Add(time.Hour) {
			d := ledgerEarlier(to, h.Add(time.Hour)).Sub(ledgerLater(since, h))
			var c executionv1alpha1.UsageCounters
			switch state {
			case executionv1alpha1.UsageReady:
				c.ReadyMilliseconds = d.Milliseconds()
			case executionv1alpha1.UsageSuspended:
				c.SuspendedMilliseconds = d.Milliseconds()
			}
			c.StorageKiBSeconds = storage / ledgerKiB * int64(d/time.Second)
			AddCounters(&totals, c)
			addTo(h, c)
		}
		since = to
	}
	for _, e := range events {
		switch {
		case e.pod != nil:
			prev, seen := lastPod[e.pod.UID]
			totals.CPUNanoseconds += e.pod.CPU - prev.CPU
			totals.MemoryPeakBytes = max(totals.MemoryPeakBytes, e.pod.WorkingSet)
			if seen {
				area += float64(prev.WorkingSet+e.pod.WorkingSet) / 2 / 1024 * e.at.Sub(prev.At).Seconds()
			}
			lastPod[e.pod.UID] = *e.pod
		case e.report != nil:
			prev := lastSeries[e.report.ID]
			c := executionv1alpha1.UsageCounters{Commands: e.report.Commands - prev.Commands,
				BytesIn: e.report.BytesIn - prev.BytesIn, BytesOut: e.report.BytesOut - prev.BytesOut}
			AddCounters(&totals, c)
			addTo(e.at, c)
			lastSeries[e.report.ID] = *e.report
		default:
			accrueUntil(e.at)
			state, storage = e.state, e.storage
		}
	}
	accrueUntil(end)
	return totals, windows, area
}

// TestLedgerFoldInChunksEqualsOneFold folds a random history in random chunks, as
// checkpoints do — accruing and pruning after each, and now and then folding the last chunk
// again as a new leader would — and checks that the ledger equals the one folded in one pass,
// that its totals are what the history adds up to, and that its windows sum to its totals.
func TestLedgerFoldInChunksEqualsOneFold(t *testing.T) {
	start := ledgerT0
	end := start.Add(72 * time.Hour)
	for seed := range uint64(16) {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x1ed6e7))
			events := ledgerEvents(rng, start)
			newStatus := func() *executionv1alpha1.ExecutionUsageStatus {
				return &executionv1alpha1.ExecutionUsageStatus{Accrual: executionv1alpha1.UsageAccrual{
					State: executionv1alpha1.UsageOther, Since: metav1.NewMicroTime(start),
				}}
			}

			once := Ledger{Status: newStatus(), Retention: ledgerRetention}
			for _, e := range events {
				e.fold(once)
			}
			once.Accrue(end)
			once.Prune(end)

			chunked := Ledger{Status: newStatus(), Retention: ledgerRetention}
			var last []ledgerEvent
			for rest := events; len(rest) > 0; {
				chunk := rest[:min(1+rng.IntN(40), len(rest))]
				rest = rest[len(chunk):]
				if last != nil && rng.IntN(3) == 0 {
					for _, e := range last { // a new leader folds the last written chunk again
						e.fold(chunked)
					}
				}
				for _, e := range chunk {
					e.fold(chunked)
				}
				if rng.IntN(4) == 0 {
					for _, e := range chunk { // a retried checkpoint
						e.fold(chunked)
					}
				}
				now := chunk[len(chunk)-1].at.Add(ledgerSeconds(rng, 0, 30))
				if len(rest) > 0 {
					now = ledgerEarlier(now, rest[0].at)
				}
				chunked.Accrue(now)
				chunked.Prune(now)
				last = chunk
			}
			chunked.Accrue(end)
			chunked.Prune(end)

			if diff := cmp.Diff(once.Status, chunked.Status); diff != "" {
				t.Errorf("folded in chunks differs from folded once (-once +chunks):\n%s", diff)
			}

			got := once.Status
			wantTotals, wantWindows, area := ledgerOracle(events, start, end)
			// The memory area is rounded once per pair of samples.
			if d := math.Abs(float64(got.Totals.MemoryKiBSeconds) - area); d > float64(len(events))/2 {
				t.Errorf("total memory area = %d KiB·s, want %.1f give or take the rounding of each sample", got.Totals.MemoryKiBSeconds, area)
			}
			wantTotals.MemoryKiBSeconds = got.Totals.MemoryKiBSeconds
			if diff := cmp.Diff(wantTotals, got.Totals); diff != "" {
				t.Errorf("totals (-history +ledger):\n%s", diff)
			}
			if diff := cmp.Diff(got.Totals, ledgerWindowSum(got.Windows)); diff != "" {
				t.Errorf("the windows' sum is not the totals (-totals +windows):\n%s", diff)
			}
			exact := map[int64]executionv1alpha1.UsageCounters{}
			for _, w := range got.Windows {
				exact[w.Start.Unix()] = executionv1alpha1.UsageCounters{
					ReadyMilliseconds: w.ReadyMilliseconds, SuspendedMilliseconds: w.SuspendedMilliseconds,
					StorageKiBSeconds: w.StorageKiBSeconds, Commands: w.Commands, BytesIn: w.BytesIn, BytesOut: w.BytesOut,
				}
				if w.CPUNanoseconds < 0 || w.MemoryKiBSeconds < 0 {
					t.Errorf("window %s has a negative count: %+v", w.Start.UTC().Format(time.RFC3339), w.UsageCounters)
				}
			}
			maps := cmpopts.IgnoreMapEntries(func(_ int64, c executionv1alpha1.UsageCounters) bool { return c == executionv1alpha1.UsageCounters{} })
			if diff := cmp.Diff(wantWindows, exact, maps); diff != "" {
				t.Errorf("hourly time, storage and gateway counts, by Unix hour (-history +ledger):\n%s", diff)
			}
			if got.EndedAt == nil || !got.EndedAt.Time.Equal(end.Add(-time.Hour)) {
				t.Errorf("EndedAt = %v, want %v", got.EndedAt, end.Add(-time.Hour))
			}
		})
	}
}

// ledgerSeconds is a random whole number of seconds in [lo, hi].
func ledgerSeconds(rng *rand.Rand, lo, hi int) time.Duration {
	return time.Duration(lo+rng.IntN(hi-lo+1)) * time.Second
}

// ledgerRetention keeps every window of the tests' histories (three days and more).
const ledgerRetention = 35 * 24 * time.Hour
