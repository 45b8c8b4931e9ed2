package process

import (
	"strings"
	"testing"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

func TestCaptureKeepsHeadAndTail(t *testing.T) {
	cases := []struct {
		name   string
		limit  int
		writes []string
	}{
		{"fits", 10, []string{"abc", "defgh"}},
		{"exactly the cap", 10, []string{"0123456789"}},
		{"one over", 10, []string{"0123456789", "X"}},
		{"many small writes", 7, strings.Split("the quick brown fox jumps over the lazy dog", "")},
		{"one huge write", 8, []string{strings.Repeat("ab", 1000) + "END"}},
		{"wraps the ring", 6, []string{"aaaa", "bbbb", "cccc", "dd"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCapture(tc.limit)
			all := strings.Join(tc.writes, "")
			for _, w := range tc.writes {
				if n, err := c.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			out := c.Captured()
			if out.GetTotalBytes() != uint64(len(all)) {
				t.Fatalf("total %d, want %d", out.GetTotalBytes(), len(all))
			}
			if len(all) <= tc.limit {
				if string(out.GetHead()) != all || len(out.GetTail()) != 0 || out.GetTruncated() {
					t.Fatalf("untruncated: %+v", out)
				}
				return
			}
			half := tc.limit / 2
			if !out.GetTruncated() || string(out.GetHead()) != all[:half] || string(out.GetTail()) != all[len(all)-(tc.limit-half):] {
				t.Fatalf("head %q tail %q of %q", out.GetHead(), out.GetTail(), all)
			}
		})
	}
}

func TestMergeEnvOverridesAndDropsDenied(t *testing.T) {
	env := mergeEnv([]string{"PATH=/bin", "LD_PRELOAD=/evil.so", "A=1", "A=2"}, []*executionv1.EnvironmentVariable{{Name: "A", Value: "3"}, {Name: "B", Value: "4"}})
	got := strings.Join(env, ",")
	if got != "PATH=/bin,A=3,B=4" {
		t.Fatalf("env = %s", got)
	}
	if env := mergeEnv(nil, nil); len(env) != 1 || env[0] != "PATH="+defaultPath {
		t.Fatalf("default PATH missing: %v", env)
	}
}

func TestParseOOMKills(t *testing.T) {
	n, ok := parseOOMKills("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\noom_group_kill 0\n")
	if !ok || n != 2 {
		t.Fatalf("got %d %v", n, ok)
	}
	if _, ok := parseOOMKills("low 0\n"); ok {
		t.Fatal("missing counter reported")
	}
}

func TestReceiptCoversTheResult(t *testing.T) {
	a := &executionv1.CommandResult{State: executionv1.CommandState_COMMAND_STATE_SUCCEEDED, Stdout: &executionv1.CapturedOutput{Head: []byte("x")}}
	b := &executionv1.CommandResult{State: executionv1.CommandState_COMMAND_STATE_SUCCEEDED, Stdout: &executionv1.CapturedOutput{Head: []byte("y")}}
	ra, rb := Receipt(a), Receipt(b)
	if !strings.HasPrefix(ra, "sha256:") || len(ra) != 7+64 || ra == rb {
		t.Fatalf("receipts %s %s", ra, rb)
	}
	a.Receipt = ra
	if Receipt(a) != ra {
		t.Fatal("the receipt field itself changed the receipt")
	}
}

// The memory cgroup's file is found through the hierarchy's mount: on a host, where the
// mount's root is the hierarchy's; in a container, where it is the container's own cgroup
// (what /proc/self/cgroup names in full is the mount's root); and under a cgroup namespace.
func TestCgroupFileThroughTheMount(t *testing.T) {
	const pod = "/execplane-devnode/kubepods/burstable/pod1/ctr1"
	for _, tc := range []struct {
		name, mountinfo, fstype, controller, path, want string
	}{
		{"v1 host", "30 25 0:26 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n", "cgroup", "memory", "/a/b",
			"/sys/fs/cgroup/memory/a/b/memory.oom_control"},
		{"v1 container", "1 0 0:26 / / ro - overlay overlay ro\n" +
			"40 38 0:26 " + pod + " /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n" +
			"41 38 0:27 " + pod + " /sys/fs/cgroup/pids ro,nosuid - cgroup cgroup rw,pids\n", "cgroup", "memory", pod,
			"/sys/fs/cgroup/memory/memory.oom_control"},
		{"v1 other controllers only", "41 38 0:27 / /sys/fs/cgroup/pids ro - cgroup cgroup rw,pids\n", "cgroup", "memory", "/a",
			"/sys/fs/cgroup/memory/a/memory.oom_control"},
		{"v2 namespace", "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "cgroup2", "", "/",
			"/sys/fs/cgroup/memory.events"},
		{"v2 root elsewhere", "30 25 0:26 /x /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "cgroup2", "", "/y",
			"/sys/fs/cgroup/y/memory.events"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "memory.oom_control"
			if tc.fstype == "cgroup2" {
				name = "memory.events"
			}
			if got := cgroupFile(tc.mountinfo, tc.fstype, tc.controller, tc.path, name); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}
