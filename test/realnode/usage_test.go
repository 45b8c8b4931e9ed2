package realnode_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/pkg/client"
)

// burnScript burns over 2 CPU-seconds (14 million rounds of busybox awk's loop: 2.4 s on
// this kind of machine), then holds holdMiB of written memory (0: none)
// for 10 s — dd's block, read from /dev/zero, which it holds while its write to sleep's
// pipe blocks: 100 MiB within a tenth of a second, nothing more — and prints, last, the
// shell's times: its own CPU and its children's. The example executor is busybox.
func burnScript(holdMiB int) string {
	return `awk 'BEGIN { for (i = 0; i < 14000000; i++) t += i; if (t < 0) print t }'
dd if=/dev/zero bs=` + strconv.Itoa(max(holdMiB<<20, 1)) + ` count=1 2>/dev/null | sleep 10
times`
}

// commandCPU sums the shell's times ("0m0.060s 0m0.200s" for itself, then its
// children's): the command's own accounting, in seconds.
func commandCPU(t *testing.T, out string) float64 {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 {
		t.Fatalf("times printed %q", out)
	}
	var sum float64
	for _, line := range lines[len(lines)-2:] {
		for _, f := range strings.Fields(line) {
			m, sec, ok := strings.Cut(strings.TrimSuffix(f, "s"), "m")
			mins, err1 := strconv.ParseFloat(m, 64)
			secs, err2 := strconv.ParseFloat(sec, 64)
			if !ok || err1 != nil || err2 != nil {
				t.Fatalf("times printed %q", out)
			}
			sum += mins*60 + secs
		}
	}
	return sum
}

// podCPU is the executor Pod's cumulative CPU time as its cgroup (v1 cpuacct) counts it,
// read on the node: what the ledger is checked against.
func podCPU(t *testing.T, uid string) time.Duration {
	t.Helper()
	var found string
	for _, root := range []string{"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpuacct"} {
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			switch {
			case err != nil:
				return filepath.SkipDir
			case !d.IsDir():
				return nil
			}
			if strings.HasSuffix(path, "pod"+uid) || strings.HasSuffix(path, "pod"+strings.ReplaceAll(uid, "-", "_")) {
				found = path
				return filepath.SkipAll
			}
			return nil
		})
		if found != "" {
			break
		}
	}
	if found == "" {
		t.Fatalf("no cgroup of Pod %s on the node", uid)
	}
	b, err := os.ReadFile(filepath.Join(found, "cpuacct.usage"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(n)
}

// A command burning 2 CPU-seconds and holding 100 MiB for 10 s, on the real node: the
// ledger's CPU within 5 % of what the Pod's cgroup counted over the same time (and of the
// command's own rusage plus the helper's), and its memory integral, less that of the same
// command without the 100 MiB, within 5 % of 100 MiB × 10 s = 1,024,000 KiB·s.
func TestUsageMatchesTheCgroup(t *testing.T) {
	s := startSystemArgs(t, []string{"--usage-sample-interval", "250ms", "--usage-checkpoint-interval", "2s"})
	w := s.ensure(t, "usage-burn", profileExample)
	uid := s.pod(t, w).UID
	usage := func() *client.UsageCounters {
		t.Helper()
		u, err := w.env.Usage(ctx(t), client.UsageOptions{})
		if err != nil {
			t.Fatalf("usage: %v", err)
		}
		return u.GetTotals()
	}
	// settled waits for the ledger to have sampled the Pod after the last command: two
	// answers four kubelet samples apart whose CPU agrees.
	settled := func() *client.UsageCounters {
		var prev *client.UsageCounters
		var out *client.UsageCounters
		clustertest.Eventually(t, 30*time.Second, "the ledger's CPU settled", func() bool {
			cur := usage()
			ok := prev != nil && cur.GetCpuNanoseconds() == prev.GetCpuNanoseconds() && cur.GetCpuNanoseconds() > 0
			prev, out = cur, cur
			if !ok {
				wait, cancel := context.WithTimeout(ctx(t), 10*time.Second)
				defer cancel()
				if err := s.AwaitLeaderMetric(wait, `execplane_usage_kubelet_scrapes_total{result="ok"}`, 4); err != nil {
					t.Fatal(err)
				}
			}
			return ok
		})
		return out
	}
	run := func(holdMiB int) (ledgerCPU, cgroupCPU time.Duration, rusage float64, memory int64) {
		before, cg0 := settled(), podCPU(t, string(uid))
		out := w.must(t, burnScript(holdMiB))
		after, cg1 := settled(), podCPU(t, string(uid))
		r := commandCPU(t, out)
		return time.Duration(after.GetCpuNanoseconds() - before.GetCpuNanoseconds()), cg1 - cg0, r,
			after.GetMemoryKibSeconds() - before.GetMemoryKibSeconds()
	}
	ledgerCPU, cgroupCPU, rusage, withMemory := run(100)
	t.Logf("CPU: ledger %v, cgroup %v, the command's rusage %.3f s", ledgerCPU, cgroupCPU, rusage)
	if d := math.Abs(float64(ledgerCPU-cgroupCPU)) / float64(cgroupCPU); d > 0.05 {
		t.Errorf("the ledger's CPU %v is %.1f %% from the cgroup's %v", ledgerCPU, 100*d, cgroupCPU)
	}
	if rusage < 2.0 || float64(ledgerCPU) < rusage*1e9 || float64(ledgerCPU) > rusage*1e9*1.05+0.2e9 {
		t.Errorf("the ledger's CPU %v against the command's own %.3f s (+ at most 5 %% and 200 ms of the helper's)", ledgerCPU, rusage)
	}
	_, _, _, without := run(0)
	held := withMemory - without
	const want = 100 * 1024 * 10 // KiB-seconds
	t.Logf("memory: %d KiB·s with 100 MiB, %d without: %d KiB·s held (want %d)", withMemory, without, held, want)
	if d := math.Abs(float64(held-want)) / want; d > 0.05 {
		t.Errorf("100 MiB for 10 s integrated to %d KiB·s, %.1f %% from %d", held, 100*d, want)
	}
	if peak := usage().GetMemoryPeakBytes(); peak < 100<<20 {
		t.Errorf("peak working set %d bytes, under the 100 MiB held", peak)
	}
}
