package usage

import (
	"context"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// testNow stands in for the time a response was read.
var testNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// approxTime compares start times, which pass through float seconds (≈256 ns of precision today).
var approxTime = cmpopts.EquateApproxTime(time.Microsecond)

func readTestdata(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func only(namespaces ...string) func(string) bool {
	return func(ns string) bool {
		for _, n := range namespaces {
			if n == ns {
				return true
			}
		}
		return false
	}
}

// cgroupV1Sample is the one executor container of testdata/resource-cgroupv1.txt.
var cgroupV1Sample = Sample{
	Namespace:  "execplane-executors-qltd8",
	Pod:        "xenv-33c129d4e864fa47b987-x0",
	Container:  "executor",
	CPU:        64707405,
	WorkingSet: 1724416,
	At:         time.UnixMilli(1796469863748),
	StartedAt:  time.Unix(1796469861, 504008300),
}

func TestParseResource(t *testing.T) {
	execA := Sample{
		Namespace: "execplane-executors-a", Pod: "xenv-a-x0", Container: "executor",
		CPU: 12_500_000_000, WorkingSet: 268435456,
		At: time.UnixMilli(1796470000100), StartedAt: time.Unix(1796469900, 0),
	}
	execB := Sample{
		Namespace: "execplane-executors-b", Pod: "xenv-b-x0", Container: "executor",
		CPU: 3_000_000_001, WorkingSet: 5242880,
		At: time.UnixMilli(1796470000200), StartedAt: time.Unix(1796469950, 0),
	}
	coredns := Sample{
		Namespace: "kube-system", Pod: "coredns-5d78c9869d-abcde", Container: "coredns",
		CPU: 401_250_000_000, WorkingSet: 16777216,
		At: time.UnixMilli(1796470000300), StartedAt: time.Unix(1796400000, 0),
	}
	const cpuA = `container_cpu_usage_seconds_total{container="c",namespace="a",pod="p"} `
	const wsA = `container_memory_working_set_bytes{container="c",namespace="a",pod="p"} `
	const startA = `container_start_time_seconds{container="c",namespace="a",pod="p"} `
	cases := []struct {
		name  string
		input string
		keep  func(string) bool
		want  []Sample
	}{
		{name: "real cgroup v1 kubelet", input: readTestdata(t, "resource-cgroupv1.txt"),
			keep: only("execplane-executors-qltd8"), want: []Sample{cgroupV1Sample}},
		{name: "cgroup v2, all namespaces", input: readTestdata(t, "resource-cgroupv2.txt"),
			want: []Sample{execA, execB, coredns}},
		{name: "cgroup v2, kube-system filtered out", input: readTestdata(t, "resource-cgroupv2.txt"),
			keep: only("execplane-executors-a", "execplane-executors-b"), want: []Sample{execA, execB}},
		{name: "every namespace filtered out", input: readTestdata(t, "resource-cgroupv1.txt"),
			keep: only("elsewhere"), want: []Sample{}},
		{name: "empty exposition", input: "", want: []Sample{}},
		{name: "no timestamps: the read time", input: cpuA + "1\n" + wsA + "2\n",
			want: []Sample{{Namespace: "a", Pod: "p", Container: "c", CPU: 1e9, WorkingSet: 2, At: testNow}}},
		{name: "CPU without working set", input: cpuA + "0.5 1000\n",
			want: []Sample{{Namespace: "a", Pod: "p", Container: "c", CPU: 5e8, At: time.UnixMilli(1000)}}},
		{name: "working set without CPU takes its timestamp", input: wsA + "4096 2000\n" + startA + "1.5\n",
			want: []Sample{{Namespace: "a", Pod: "p", Container: "c", WorkingSet: 4096, At: time.UnixMilli(2000),
				StartedAt: time.Unix(1, 5e8)}}},
		{name: "CPU timestamp wins over working set's", input: wsA + "1 2000\n" + cpuA + "1 1000\n",
			want: []Sample{{Namespace: "a", Pod: "p", Container: "c", CPU: 1e9, WorkingSet: 1, At: time.UnixMilli(1000)}}},
		{name: "start time alone makes no sample", input: startA + "1.5\n", want: []Sample{}},
		{name: "CPU rounds to the nearest nanosecond", input: cpuA + "1.0000000006\n",
			want: []Sample{{Namespace: "a", Pod: "p", Container: "c", CPU: 1_000_000_001, At: testNow}}},
		{name: "bad values in a filtered-out namespace are not ours to judge",
			input: cpuA + "-1\n" + wsA + "NaN\n", keep: only("b"), want: []Sample{}},
		{name: "untyped families", input: "# HELP x\n" + cpuA + "2\n",
			want: []Sample{{Namespace: "a", Pod: "p", Container: "c", CPU: 2e9, At: testNow}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseResource(strings.NewReader(tc.input), tc.keep, testNow)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, approxTime); diff != "" {
				t.Errorf("samples (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseResourceErrors(t *testing.T) {
	const cpu = `container_cpu_usage_seconds_total{container="c",namespace="a",pod="p"} `
	const ws = `container_memory_working_set_bytes{container="c",namespace="a",pod="p"} `
	const start = `container_start_time_seconds{container="c",namespace="a",pod="p"} `
	cases := []struct {
		name, input, wantErr string
	}{
		{"last line unterminated (a truncated body)", cpu + "1 1000", "unexpected end of input stream"},
		{"empty braces after a TYPE line (panics expfmt v0.70.0)", "# TYPE A counter\n{}0\n", "parser panicked"},
		{"empty braces first", "{} 0\n", "invalid metric name"},
		{"unterminated labels", `container_cpu_usage_seconds_total{container="c" 1` + "\n", "parse resource metrics"},
		{"value not a number", cpu + "lots\n", `expected float as value, got "lots"`},
		{"timestamp not an integer", cpu + "1 soon\n", "expected integer as timestamp"},
		{"trailing garbage", cpu + "1 1000 extra\n", "spurious string after timestamp"},
		{"second TYPE line", "# TYPE container_cpu_usage_seconds_total counter\n# TYPE container_cpu_usage_seconds_total gauge\n", "second TYPE line"},
		{"negative CPU", cpu + "-0.5\n", "invalid value -0.5"},
		{"NaN working set", ws + "NaN\n", "invalid value NaN"},
		{"infinite CPU", cpu + "+Inf\n", "invalid value +Inf"},
		{"negative start time", start + "-1\n", "invalid value -1"},
		{"CPU overflowing int64 nanoseconds", cpu + "1e10\n", "overflows int64"},
		{"working set overflowing int64 bytes", ws + "9.3e18\n", "overflows int64"},
		{"working set at 2^63", ws + "9223372036854775808\n", "overflows int64"},
		{"no pod label", `container_cpu_usage_seconds_total{container="c",namespace="a"} 1` + "\n", "without a namespace, pod or container label"},
		{"empty container label", `container_memory_working_set_bytes{container="",namespace="a",pod="p"} 1` + "\n", "without a namespace, pod or container label"},
		{"series twice", cpu + "1\n" + cpu + "2\n", "a/p/c given twice"},
		{"summary where a counter belongs", "# TYPE container_cpu_usage_seconds_total summary\n" +
			`container_cpu_usage_seconds_total{container="c",namespace="a",pod="p",quantile="0.5"} 1` + "\n", "not a counter, gauge or untyped"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseResource(strings.NewReader(tc.input), nil, testNow)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ParseResource = %v, %v; want an error containing %q", got, err, tc.wantErr)
			}
		})
	}
}

func FuzzParseResource(f *testing.F) {
	f.Add(readTestdata(f, "resource-cgroupv1.txt"))
	f.Add(readTestdata(f, "resource-cgroupv2.txt"))
	f.Add(`container_cpu_usage_seconds_total{container="c",namespace="a",pod="p"} 1e9 -5` + "\n")
	f.Fuzz(func(t *testing.T, input string) {
		samples, err := ParseResource(strings.NewReader(input), nil, testNow)
		if err != nil {
			return
		}
		for _, s := range samples {
			if s.Namespace == "" || s.Pod == "" || s.Container == "" || s.CPU < 0 || s.WorkingSet < 0 {
				t.Fatalf("accepted an impossible sample %+v", s)
			}
		}
	})
}

func TestKubeletHost(t *testing.T) {
	addrs := func(pairs ...string) []corev1.NodeAddress {
		var a []corev1.NodeAddress
		for i := 0; i < len(pairs); i += 2 {
			a = append(a, corev1.NodeAddress{Type: corev1.NodeAddressType(pairs[i]), Address: pairs[i+1]})
		}
		return a
	}
	cases := []struct {
		name      string
		addresses []corev1.NodeAddress
		port      int32
		want      string
		wantErr   string
	}{
		{name: "InternalIP first", port: 10250, want: "10.0.0.5:10250",
			addresses: addrs("Hostname", "node-a", "ExternalIP", "203.0.113.9", "InternalIP", "10.0.0.5")},
		{name: "first ExternalIP without an InternalIP", port: 10250, want: "203.0.113.9:10250",
			addresses: addrs("Hostname", "node-a", "ExternalIP", "203.0.113.9", "ExternalIP", "203.0.113.10")},
		{name: "Hostname last", port: 10250, want: "node-a:10250", addresses: addrs("InternalDNS", "node-a.internal", "Hostname", "node-a")},
		{name: "IPv6 bracketed", port: 10250, want: "[fd00::5]:10250", addresses: addrs("InternalIP", "fd00::5")},
		{name: "no usable address", port: 10250, addresses: addrs("InternalDNS", "node-a.internal"), wantErr: "no InternalIP, ExternalIP or Hostname"},
		{name: "no port", addresses: addrs("InternalIP", "10.0.0.5"), wantErr: "no kubelet port"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
			node.Status.Addresses = tc.addresses
			node.Status.DaemonEndpoints.KubeletEndpoint.Port = tc.port
			got, err := kubeletHost(node)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("kubeletHost = %q, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("kubeletHost = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNewKubelet(t *testing.T) {
	cases := []struct {
		name    string
		cfg     KubeletConfig
		wantErr string
	}{
		{name: "defaults", cfg: KubeletConfig{Rest: &rest.Config{BearerToken: "t"}}},
		{name: "API server's CA and name inherited then cleared",
			cfg: KubeletConfig{Rest: &rest.Config{TLSClientConfig: rest.TLSClientConfig{ServerName: "kubernetes", CAData: testCAPEM(t)}}}},
		{name: "skip verification despite the API server's CA",
			cfg: KubeletConfig{Rest: &rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: testCAPEM(t)}}, InsecureSkipVerify: true}},
		{name: "no rest config", cfg: KubeletConfig{}, wantErr: "no rest config"},
		{name: "negative timeout", cfg: KubeletConfig{Rest: &rest.Config{}, Timeout: -time.Second}, wantErr: "negative timeout"},
		{name: "CA file and skipping verification", cfg: KubeletConfig{Rest: &rest.Config{}, CAFile: "ca.pem", InsecureSkipVerify: true},
			wantErr: "exclude each other"},
		{name: "CA file missing", cfg: KubeletConfig{Rest: &rest.Config{}, CAFile: filepath.Join(t.TempDir(), "absent.pem")},
			wantErr: "absent.pem"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k, err := NewKubelet(tc.cfg)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := k.client.Timeout; got != defaultScrapeTimeout {
					t.Errorf("timeout = %v, want %v", got, defaultScrapeTimeout)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("NewKubelet = %v; want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// testCAPEM is a throwaway server's certificate, valid PEM for a CA bundle.
func testCAPEM(t *testing.T) []byte {
	t.Helper()
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

func TestKubeletScrape(t *testing.T) {
	const token = "controller-token"
	realBody := readTestdata(t, "resource-cgroupv1.txt")
	serve := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if got := r.Header.Get("Authorization"); got != "Bearer "+token {
				http.Error(w, "unauthorized: "+got, http.StatusUnauthorized)
				return
			}
			if r.URL.Path != resourcePath || r.Method != http.MethodGet {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
			_, _ = w.Write([]byte(body))
		}
	}
	// atBound is a valid exposition (comments only) exactly maxResourceBody bytes long.
	atBound := strings.Repeat("#"+strings.Repeat(" ", 1022)+"\n", maxResourceBody/1024)
	cases := []struct {
		name    string
		handler http.HandlerFunc
		verify  string // "ca" (the server's certificate as CAFile), "insecure", or "" (Rest's CA: none)
		timeout time.Duration
		want    []Sample
		wantErr string
		wantIs  error
	}{
		{name: "real exposition, CA file", handler: serve(realBody), verify: "ca", want: []Sample{cgroupV1Sample}},
		{name: "real exposition, verification skipped", handler: serve(realBody), verify: "insecure", want: []Sample{cgroupV1Sample}},
		{name: "untimed lines take the read time", verify: "ca",
			handler: serve(`container_cpu_usage_seconds_total{container="executor",namespace="execplane-executors-qltd8",pod="p"} 1` + "\n"),
			want:    []Sample{{Namespace: "execplane-executors-qltd8", Pod: "p", Container: "executor", CPU: 1e9, At: testNow}}},
		{name: "unknown certificate refused", handler: serve(realBody), wantErr: "certificate"},
		{name: "404 named", handler: http.NotFound, verify: "ca", wantErr: "404 Not Found"},
		{name: "403 named", verify: "ca", wantErr: "403 Forbidden",
			handler: func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "forbidden", http.StatusForbidden) }},
		{name: "redirect not followed", verify: "ca", wantErr: "302 Found",
			handler: func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != resourcePath {
					t.Errorf("redirect followed to %s", r.URL.Path)
				}
				http.Redirect(w, r, "/elsewhere", http.StatusFound)
			}},
		{name: "body at the bound", handler: serve(atBound), verify: "ca", want: []Sample{}},
		{name: "body past the bound", handler: serve(atBound + "\n"), verify: "ca", wantErr: "exceeds"},
		{name: "malformed body", handler: serve("container_cpu_usage_seconds_total{\n"), verify: "ca", wantErr: "parse resource metrics"},
		{name: "timeout", verify: "ca", timeout: 50 * time.Millisecond, wantIs: context.DeadlineExceeded,
			handler: func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewUnstartedServer(tc.handler)
			srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
			srv.StartTLS()
			defer srv.Close()
			cfg := KubeletConfig{Rest: &rest.Config{Host: "https://apiserver.invalid", BearerToken: token}, Timeout: tc.timeout}
			switch tc.verify {
			case "ca":
				cfg.CAFile = filepath.Join(t.TempDir(), "kubelet-ca.pem")
				pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
				if err := os.WriteFile(cfg.CAFile, pemBytes, 0o600); err != nil {
					t.Fatal(err)
				}
			case "insecure":
				cfg.InsecureSkipVerify = true
			}
			k, err := NewKubelet(cfg)
			if err != nil {
				t.Fatal(err)
			}
			k.now = func() time.Time { return testNow }
			got, err := k.Scrape(context.Background(), serverNode(t, srv), only("execplane-executors-qltd8"))
			if tc.wantIs != nil {
				if !errors.Is(err, tc.wantIs) {
					t.Fatalf("Scrape = %v, %v; want an error wrapping %v", got, err, tc.wantIs)
				}
				return
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Scrape = %v, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, approxTime); diff != "" {
				t.Errorf("samples (-want +got):\n%s", diff)
			}
		})
	}
}

// serverNode is a Node whose kubelet endpoint is srv.
func serverNode(t *testing.T, srv *httptest.Server) *corev1.Node {
	t.Helper()
	host, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p > math.MaxInt32 {
		t.Fatalf("port %q: %v", port, err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "node-a"}, {Type: corev1.NodeInternalIP, Address: host}}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(p)
	return node
}
