package devcluster

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The fake nodes' /metrics/resource: what a kubelet reports of its containers, as near as
// processes without a cgroup allow. A Pod's CPU is the CPU time of its exec calls that
// ended (their rusage, which includes the descendants they reaped) plus that of its marked
// processes still running; its working set is the resident memory of those processes. A
// durable command's supervisor outlives its exec call and is reaped by someone else: its
// CPU counts while it runs and is gone from the sum when it ends, which the usage ledger
// takes as a counter going down (rebased, never counted twice). The real node's kubelet is
// the reference (docs/usage.md).

// podUsage is what the endpoint remembers of one Pod's ended exec calls.
type podUsage struct {
	namespace, name, container string
	// ended is the CPU time of the ended exec calls, in nanoseconds.
	ended int64
}

// nodeUsage counts the Pods' CPU; a NodeExec has one.
type nodeUsage struct {
	mu   sync.Mutex
	pods map[string]*podUsage // by Pod UID
}

// ran records an exec call of the Pod uid: started (state nil), so that the Pod's running
// processes are reported, or ended.
func (u *nodeUsage) ran(uid, namespace, name, container string, state *os.ProcessState) {
	var cpu time.Duration
	if state != nil {
		if ru, ok := state.SysUsage().(*syscall.Rusage); ok {
			cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.pods == nil {
		u.pods = map[string]*podUsage{}
	}
	p := u.pods[uid]
	if p == nil {
		p = &podUsage{namespace: namespace, name: name, container: container}
		u.pods[uid] = p
	}
	p.ended += int64(cpu)
}

// forget drops a deleted Pod.
func (u *nodeUsage) forget(uid string) {
	u.mu.Lock()
	delete(u.pods, uid)
	u.mu.Unlock()
}

// live sums the CPU time and resident memory of the running processes marked with prefix
// (podEnv=token/), by Pod UID.
func live(prefix string) map[string][2]int64 {
	out := map[string][2]int64{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	tick := int64(time.Second) / 100 // USER_HZ, 100 on Linux
	page := int64(os.Getpagesize())
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		var uid string
		for _, kv := range bytes.Split(env, []byte{0}) {
			if rest, ok := bytes.CutPrefix(kv, []byte(prefix)); ok {
				uid = string(rest)
				break
			}
		}
		if uid == "" {
			continue
		}
		stat, err1 := os.ReadFile("/proc/" + e.Name() + "/stat")
		statm, err2 := os.ReadFile("/proc/" + e.Name() + "/statm")
		if err1 != nil || err2 != nil {
			continue
		}
		// Fields after the command's closing parenthesis: state is the 3rd field of
		// stat; utime, stime, cutime and cstime the 14th to 17th (the last two: the
		// children it reaped, such as a helper's commands).
		i := bytes.LastIndexByte(stat, ')')
		f := strings.Fields(string(stat[i+1:]))
		m := strings.Fields(string(statm))
		if len(f) < 15 || len(m) < 2 {
			continue
		}
		var ticks int64
		for _, field := range f[11:15] {
			n, _ := strconv.ParseInt(field, 10, 64)
			ticks += n
		}
		rss, _ := strconv.ParseInt(m[1], 10, 64)
		v := out[uid]
		out[uid] = [2]int64{v[0] + ticks*tick, v[1] + rss*page}
	}
	return out
}

// serveResource answers /metrics/resource for the Pods that ran an exec call here.
func (n *NodeExec) serveResource(w http.ResponseWriter, _ *http.Request) {
	running := live(podEnv + "=" + n.token + "/")
	now := time.Now().UnixMilli()
	n.usage.mu.Lock()
	uids := make([]string, 0, len(n.usage.pods))
	for uid := range n.usage.pods {
		uids = append(uids, uid)
	}
	sort.Strings(uids)
	var b bytes.Buffer
	b.WriteString("# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds\n# TYPE container_cpu_usage_seconds_total counter\n")
	for _, uid := range uids {
		p := n.usage.pods[uid]
		fmt.Fprintf(&b, "container_cpu_usage_seconds_total{container=%q,namespace=%q,pod=%q} %.9f %d\n",
			p.container, p.namespace, p.name, float64(p.ended+running[uid][0])/1e9, now)
	}
	b.WriteString("# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes\n# TYPE container_memory_working_set_bytes gauge\n")
	for _, uid := range uids {
		p := n.usage.pods[uid]
		fmt.Fprintf(&b, "container_memory_working_set_bytes{container=%q,namespace=%q,pod=%q} %d %d\n",
			p.container, p.namespace, p.name, running[uid][1], now)
	}
	n.usage.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	_, _ = w.Write(b.Bytes())
}
