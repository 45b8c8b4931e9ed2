package usage

import (
	"math"
	"math/bits"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
)

// Window is the ledger's granularity: an hour, UTC. Days are sums of 24 windows.
const Window = time.Hour

// seriesIdle is how long a gateway series is remembered after its last report. Gateways stop
// reporting a series well before (gateway.usageSeriesIdle), so a report never arrives for a
// series forgotten here (it would count again from zero).
const seriesIdle = 2 * time.Hour

// PodSample is one executor Pod's counters at one moment: the sums over its containers.
type PodSample struct {
	Name string
	UID  types.UID
	// CPU is the cumulative CPU time in nanoseconds; WorkingSet the working set in bytes.
	CPU, WorkingSet int64
	At              time.Time
}

// SeriesReport is a gateway series' cumulative counts for one environment.
type SeriesReport struct {
	ID                          string
	Commands, BytesIn, BytesOut int64
	At                          time.Time
}

// Ledger folds observations into a usage status. Every fold is idempotent: a sample or a
// report folded twice, or older than one already folded, adds nothing. Retention drops
// windows that ended before it; totals keep everything.
type Ledger struct {
	Status    *executionv1alpha1.ExecutionUsageStatus
	Retention time.Duration
}

// FoldPod adds what a Pod used since its last folded sample: CPU as the counter's increase,
// memory as the trapezoid between the two working sets, both spread over the hours between.
// A Pod seen for the first time counts its CPU from zero (its whole life) and its memory from
// this sample. A counter that went down (a container gone from the sum) is taken as the new
// base, adding nothing.
func (l Ledger) FoldPod(s PodSample) {
	st := l.Status
	i := slices.IndexFunc(st.Pods, func(p executionv1alpha1.UsagePod) bool { return p.UID == s.UID })
	if i < 0 {
		if len(st.Pods) >= executionv1alpha1.MaxUsagePods && !slices.ContainsFunc(st.Pods, func(p executionv1alpha1.UsagePod) bool { return p.SampledAt.Before(&metav1.MicroTime{Time: s.At}) }) {
			return // older than every Pod remembered: it would be forgotten at once, and counted again
		}
		l.spread(s.At, s.At, executionv1alpha1.UsageCounters{CPUNanoseconds: max(s.CPU, 0), MemoryPeakBytes: max(s.WorkingSet, 0)})
		st.Pods = append(st.Pods, executionv1alpha1.UsagePod{Name: s.Name, UID: s.UID, CPUNanoseconds: max(s.CPU, 0),
			WorkingSetBytes: max(s.WorkingSet, 0), SampledAt: metav1.NewMicroTime(s.At)})
		l.trimPods()
		return
	}
	p := &st.Pods[i]
	from := p.SampledAt.Time
	if !s.At.After(from) {
		return
	}
	delta := max(s.CPU-p.CPUNanoseconds, 0)
	ws := max(s.WorkingSet, 0)
	// KiB-seconds of the trapezoid: (w0+w1)/2 bytes over dt, in float to avoid overflow of
	// bytes × nanoseconds; the error is far below a KiB-second.
	area := int64(math.Round(float64(p.WorkingSetBytes+ws) / 2 / 1024 * s.At.Sub(from).Seconds()))
	l.spread(from, s.At, executionv1alpha1.UsageCounters{CPUNanoseconds: delta, MemoryKiBSeconds: area})
	l.spread(s.At, s.At, executionv1alpha1.UsageCounters{MemoryPeakBytes: ws})
	p.CPUNanoseconds, p.WorkingSetBytes, p.SampledAt = s.CPU, ws, metav1.NewMicroTime(s.At)
}

// trimPods keeps the most recently sampled MaxUsagePods Pods.
func (l Ledger) trimPods() {
	pods := l.Status.Pods
	if len(pods) <= executionv1alpha1.MaxUsagePods {
		return
	}
	slices.SortStableFunc(pods, func(a, b executionv1alpha1.UsagePod) int { return a.SampledAt.Compare(b.SampledAt.Time) })
	l.Status.Pods = slices.Clone(pods[len(pods)-executionv1alpha1.MaxUsagePods:])
}

// FoldSeries adds a gateway series' increase since its last folded report, in the hour of
// the report. Reports are cumulative: a late or repeated one adds nothing.
func (l Ledger) FoldSeries(r SeriesReport) {
	st := l.Status
	i := slices.IndexFunc(st.Series, func(s executionv1alpha1.UsageSeries) bool { return s.ID == r.ID })
	if i < 0 {
		// A series is only forgotten once idle past seriesIdle (gateways stop sending it
		// well before): with every slot taken by a series changed more recently, the new
		// one is not counted at all — a loss, never a count twice.
		st.Series = slices.DeleteFunc(st.Series, func(s executionv1alpha1.UsageSeries) bool {
			return r.At.Sub(s.ReportedAt.Time) > seriesIdle
		})
		if len(st.Series) >= executionv1alpha1.MaxUsageSeries {
			return
		}
		st.Series = append(st.Series, executionv1alpha1.UsageSeries{ID: r.ID})
		i = len(st.Series) - 1
	}
	s := &st.Series[i]
	add := executionv1alpha1.UsageCounters{
		Commands: max(r.Commands-s.Commands, 0), BytesIn: max(r.BytesIn-s.BytesIn, 0), BytesOut: max(r.BytesOut-s.BytesOut, 0),
	}
	s.Commands, s.BytesIn, s.BytesOut = max(s.Commands, r.Commands), max(s.BytesIn, r.BytesIn), max(s.BytesOut, r.BytesOut)
	// ReportedAt is the last report that added something: a gateway sends a series again
	// for a while after its last change, and those copies change nothing (no write for an
	// idle environment); the series is forgotten seriesIdle after its last change.
	if add != (executionv1alpha1.UsageCounters{}) || i == len(st.Series)-1 && s.ReportedAt.IsZero() {
		if r.At.After(s.ReportedAt.Time) {
			s.ReportedAt = metav1.NewTime(r.At)
		}
		l.spread(r.At, r.At, add)
	}
	// Forget series idle long enough that no gateway reports them any more.
	st.Series = slices.DeleteFunc(st.Series, func(s executionv1alpha1.UsageSeries) bool {
		return r.At.Sub(s.ReportedAt.Time) > seriesIdle
	})
}

// Accrue folds the time-based counters (ready and suspended time, storage) from the
// accrual's Since up to to, and moves Since there.
func (l Ledger) Accrue(to time.Time) {
	a := &l.Status.Accrual
	from := a.Since.Time
	if a.State == executionv1alpha1.UsageEnded || !to.After(from) {
		return
	}
	forEachHour(from, to, func(start, end time.Time) {
		// Whole milliseconds of the clock, and KiB-seconds from the hour's start: cut
		// anywhere, the pieces sum to the same.
		ms := end.UnixMilli() - start.UnixMilli()
		var c executionv1alpha1.UsageCounters
		switch a.State {
		case executionv1alpha1.UsageReady:
			c.ReadyMilliseconds = ms
		case executionv1alpha1.UsageSuspended:
			c.SuspendedMilliseconds = ms
		}
		hour := start.UTC().Truncate(Window).UnixMilli()
		c.StorageKiBSeconds = kibSeconds(a.StorageBytes, end.UnixMilli()-hour) - kibSeconds(a.StorageBytes, start.UnixMilli()-hour)
		l.add(start, c)
	})
	a.Since = metav1.NewMicroTime(to)
}

// Transition accrues up to at, then accrues as state with a claim of storage bytes. The
// ledger ends with UsageEnded, once: nothing accrues after it.
func (l Ledger) Transition(state executionv1alpha1.UsageState, storage int64, at time.Time) {
	a := &l.Status.Accrual
	if a.State == executionv1alpha1.UsageEnded {
		return
	}
	l.Accrue(at)
	a.State, a.StorageBytes = state, max(storage, 0)
	if at.After(a.Since.Time) {
		a.Since = metav1.NewMicroTime(at)
	}
	if state == executionv1alpha1.UsageEnded {
		ended := metav1.NewTime(a.Since.Time)
		l.Status.EndedAt = &ended
	}
}

// Prune drops the windows that ended before now minus the retention, and the oldest past
// MaxUsageWindows.
func (l Ledger) Prune(now time.Time) {
	cut := now.Add(-l.Retention).Add(-Window)
	ws := slices.DeleteFunc(l.Status.Windows, func(w executionv1alpha1.UsageWindow) bool { return w.Start.Time.Before(cut) })
	if n := len(ws) - executionv1alpha1.MaxUsageWindows; n > 0 {
		ws = ws[n:]
	}
	l.Status.Windows = ws
}

// kibSeconds is ⌊bytes × ms / 1024 / 1000⌋ without overflow (bytes up to 2⁶³, ms up to an
// hour).
func kibSeconds(bytes, ms int64) int64 {
	if bytes <= 0 || ms <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(bytes), uint64(ms))
	const d = 1024 * 1000
	q1, r1 := hi/d, hi%d
	q0, _ := bits.Div64(r1, lo, d)
	if q1 > 0 || q0 > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q0)
}

// spread adds c over [from, to]: counters in proportion to the time in each hour, the peak
// to the hour of to. A zero-length span puts everything in to's hour. Each hour gets the
// difference of the rounded cumulative shares, so every part is within one unit of its
// share, none is negative, and the parts sum to c exactly.
func (l Ledger) spread(from, to time.Time, c executionv1alpha1.UsageCounters) {
	peak := c.MemoryPeakBytes
	c.MemoryPeakBytes = 0
	total := to.Sub(from)
	if total <= 0 {
		l.add(to, c)
	} else {
		var done executionv1alpha1.UsageCounters
		forEachHour(from, to, func(_, end time.Time) {
			upto := c
			if !end.Equal(to) {
				upto = scale(c, float64(end.Sub(from))/float64(total))
			}
			l.add(end.Add(-1), sub(upto, done)) // the hour the piece ends in
			done = upto
		})
	}
	if peak > 0 {
		l.add(to, executionv1alpha1.UsageCounters{MemoryPeakBytes: peak})
	}
}

// add adds c to the window of at and to the totals.
func (l Ledger) add(at time.Time, c executionv1alpha1.UsageCounters) {
	if c == (executionv1alpha1.UsageCounters{}) {
		return
	}
	st := l.Status
	AddCounters(&st.Totals, c)
	start := at.UTC().Truncate(Window)
	i, found := slices.BinarySearchFunc(st.Windows, start, func(w executionv1alpha1.UsageWindow, t time.Time) int { return w.Start.Time.Compare(t) })
	if !found {
		st.Windows = slices.Insert(st.Windows, i, executionv1alpha1.UsageWindow{Start: metav1.NewTime(start)})
	}
	AddCounters(&st.Windows[i].UsageCounters, c)
}

// AddCounters adds c to into (the peak is the larger).
func AddCounters(into *executionv1alpha1.UsageCounters, c executionv1alpha1.UsageCounters) {
	into.CPUNanoseconds += c.CPUNanoseconds
	into.MemoryKiBSeconds += c.MemoryKiBSeconds
	into.MemoryPeakBytes = max(into.MemoryPeakBytes, c.MemoryPeakBytes)
	into.StorageKiBSeconds += c.StorageKiBSeconds
	into.ReadyMilliseconds += c.ReadyMilliseconds
	into.SuspendedMilliseconds += c.SuspendedMilliseconds
	into.Commands += c.Commands
	into.BytesIn += c.BytesIn
	into.BytesOut += c.BytesOut
}

// scale is c × f for the additive counters (rounded).
func scale(c executionv1alpha1.UsageCounters, f float64) executionv1alpha1.UsageCounters {
	r := func(v int64) int64 { return int64(math.Round(float64(v) * f)) }
	return executionv1alpha1.UsageCounters{
		CPUNanoseconds: r(c.CPUNanoseconds), MemoryKiBSeconds: r(c.MemoryKiBSeconds), StorageKiBSeconds: r(c.StorageKiBSeconds),
		ReadyMilliseconds: r(c.ReadyMilliseconds), SuspendedMilliseconds: r(c.SuspendedMilliseconds),
		Commands: r(c.Commands), BytesIn: r(c.BytesIn), BytesOut: r(c.BytesOut),
	}
}

// sub is a − b for the additive counters.
func sub(a, b executionv1alpha1.UsageCounters) executionv1alpha1.UsageCounters {
	return executionv1alpha1.UsageCounters{
		CPUNanoseconds: a.CPUNanoseconds - b.CPUNanoseconds, MemoryKiBSeconds: a.MemoryKiBSeconds - b.MemoryKiBSeconds,
		StorageKiBSeconds: a.StorageKiBSeconds - b.StorageKiBSeconds, ReadyMilliseconds: a.ReadyMilliseconds - b.ReadyMilliseconds,
		SuspendedMilliseconds: a.SuspendedMilliseconds - b.SuspendedMilliseconds, Commands: a.Commands - b.Commands,
		BytesIn: a.BytesIn - b.BytesIn, BytesOut: a.BytesOut - b.BytesOut,
	}
}

// forEachHour calls f for each piece of [from, to) cut at the hours.
func forEachHour(from, to time.Time, f func(start, end time.Time)) {
	for start := from; start.Before(to); {
		end := start.UTC().Truncate(Window).Add(Window)
		if end.After(to) {
			end = to
		}
		f(start, end)
		start = end
	}
}
