package main

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// latencies are one side's samples of a paired comparison.
type latencies []time.Duration

func (l latencies) quantile(q float64) time.Duration {
	s := slices.Clone(l)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1)+0.5)]
}

// comparison is one operation measured three ways, in the same run on the same Pod: through
// the gateway with sessions; through a gateway with --sessions=false (one exec per
// operation); and the raw baseline (a plain exec of a standard tool doing the same work).
type comparison struct {
	name, baseline        string
	session, perExec, raw latencies
}

func ratio(a, b latencies) float64 { return float64(a.quantile(0.5)) / float64(b.quantile(0.5)) }

// measure runs the sides in turn n times (after warm-up), rotating which goes first on every
// iteration so that drift and caches weigh on all alike, and returns each side's samples.
func measure(ctx context.Context, n, warmup int, sides ...func(context.Context) error) ([]latencies, error) {
	out := make([]latencies, len(sides))
	for i := range warmup + n {
		for j := range sides {
			k := (i + j) % len(sides)
			start := time.Now()
			if err := sides[k](ctx); err != nil {
				return nil, err
			}
			if i >= warmup {
				out[k] = append(out[k], time.Since(start))
			}
		}
	}
	return out, nil
}

// throughput runs call from concurrency goroutines for d and returns completed calls per
// second. Any error ends the measurement: a benchmark of failures measures nothing.
func throughput(ctx context.Context, concurrency int, d time.Duration, call func(context.Context) error) (float64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var done atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, concurrency)
	start := time.Now()
	for range concurrency {
		wg.Go(func() {
			for !stop.Load() {
				if err := call(ctx); err != nil {
					if !stop.Load() {
						errs <- err
						cancel()
					}
					return
				}
				done.Add(1)
			}
		})
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	stop.Store(true)
	n, elapsed := done.Load(), time.Since(start)
	wg.Wait()
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	return float64(n) / elapsed.Seconds(), nil
}

// rates are rounds of a throughput comparison.
type rates struct {
	gateway, baseline []float64
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
