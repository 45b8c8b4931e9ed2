package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// What the benchmark reads of the controller process: its writes from its own metrics,
// its heap profile, its resident memory.

// scrapeWrites sums the controller's write requests (POST, PUT, PATCH, DELETE) from its
// execplane_controller_kube_requests_total counter, leaving out the leader Lease's renewals
// (one PUT per retry period, the price of leader election, reported apart).
func scrapeWrites(ctx context.Context, diag string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+diag+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var total int64
	found := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "execplane_controller_kube_requests_total{") || strings.Contains(line, `resource="leases"`) {
			continue
		}
		found = true
		for _, m := range []string{"POST", "PUT", "PATCH", "DELETE"} {
			if strings.Contains(line, `method="`+m+`"`) {
				f := strings.Fields(line)
				v, err := strconv.ParseFloat(f[len(f)-1], 64)
				if err != nil {
					return 0, err
				}
				total += int64(v)
			}
		}
	}
	if !found {
		return 0, errors.New("no execplane_controller_kube_requests_total in /metrics")
	}
	return total, sc.Err()
}

// saveHeapProfile writes the controller's heap profile (after a GC) to path.
func saveHeapProfile(ctx context.Context, diag, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+diag+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("heap profile: %s", resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, body, 0o644)
}

// waitQuiet waits until the write counter has not moved for quiet.
func waitQuiet(ctx context.Context, diag string, quiet, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last, err := scrapeWrites(ctx, diag)
	if err != nil {
		return err
	}
	since := time.Now()
	for time.Since(since) < quiet {
		if time.Now().After(deadline) {
			return fmt.Errorf("the controller kept writing for %s after all were Ready", timeout)
		}
		time.Sleep(500 * time.Millisecond)
		now, err := scrapeWrites(ctx, diag)
		if err != nil {
			return err
		}
		if now != last {
			last, since = now, time.Now()
		}
	}
	return nil
}

// rss reads the process's resident set in MiB.
func rss(pid int) (float64, error) {
	return statusField(pid, "VmRSS:")
}

func statusField(pid int, field string) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("%s missing from /proc/%d/status", field, pid)
}

type peakRSS struct {
	pid int
	mu  sync.Mutex
	mib float64
}

func (p *peakRSS) sample(ctx context.Context) {
	for ctx.Err() == nil {
		if v, err := statusField(p.pid, "VmHWM:"); err == nil {
			p.mu.Lock()
			p.mib = max(p.mib, v)
			p.mu.Unlock()
		}
		time.Sleep(time.Second)
	}
}

func (p *peakRSS) max() float64 {
	if v, err := statusField(p.pid, "VmHWM:"); err == nil {
		p.mu.Lock()
		p.mib = max(p.mib, v)
		p.mu.Unlock()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mib
}

// scrapeSum sums the samples of a metric family on the controller's /metrics.
func scrapeSum(ctx context.Context, diag, family string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+diag+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var total int64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, family+"{") && !strings.HasPrefix(line, family+" ") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, err
		}
		total += int64(v)
	}
	return total, sc.Err()
}
