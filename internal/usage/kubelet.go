package usage

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
)

const (
	// defaultScrapeTimeout bounds one scrape when KubeletConfig.Timeout is zero: a kubelet answers
	// /metrics/resource from its cached stats in well under a second, so ten seconds only trips on
	// an unreachable or wedged node, which must not stall the controller's pass for long.
	defaultScrapeTimeout = 10 * time.Second

	// maxResourceBody bounds a /metrics/resource body. A container contributes five lines of
	// about 250 bytes (≈1.3 KiB), so 16 MiB holds some 12,000 containers — far beyond a kubelet's
	// max-pods (110 by default, a few hundred in practice) times a handful of containers each —
	// while capping what a misbehaving or hostile endpoint can make the controller buffer and parse.
	maxResourceBody = 16 << 20

	// resourcePath is the kubelet's resource-metrics endpoint (authorised as nodes/metrics).
	resourcePath = "/metrics/resource"

	// acceptText asks for the classic text exposition, the one format ParseResource reads.
	acceptText = "text/plain;version=0.0.4"
)

// The container metric families read. The pod_* and node_* families are ignored: pod_* read 0 on
// cgroup v1 nodes, and usage is accounted per container.
const (
	metricCPU        = "container_cpu_usage_seconds_total"
	metricWorkingSet = "container_memory_working_set_bytes"
	metricStartTime  = "container_start_time_seconds"
)

// Sample is one container's counters as a kubelet reported them.
type Sample struct {
	Namespace, Pod, Container string
	// CPU is the container's cumulative CPU time (container_cpu_usage_seconds_total), in nanoseconds.
	CPU int64
	// WorkingSet is container_memory_working_set_bytes.
	WorkingSet int64
	// At is the kubelet's timestamp of the CPU sample (the exposition's millisecond timestamp); when the
	// line has no timestamp, the time the response was read. A container without a CPU line takes its
	// working-set line's timestamp instead.
	At time.Time
	// StartedAt is container_start_time_seconds (zero when absent).
	StartedAt time.Time
}

// containerKey identifies one container's series across the metric families.
type containerKey struct{ namespace, pod, container string }

// ParseResource parses a kubelet's /metrics/resource exposition, keeping the containers of the
// namespaces for which keep returns true (a nil keep keeps all). A container with a CPU line but no
// working-set line (or the reverse) is kept with what it has (the other field 0); a start time alone
// makes no sample. Values that are negative, NaN or infinite, or that overflow int64
// nanoseconds/bytes, are an error (the input is untrusted), as are a container series without its
// namespace, pod or container label and a kept series given twice. now is used for lines without
// timestamps. The samples are sorted by namespace, pod and container.
func ParseResource(r io.Reader, keep func(namespace string) bool, now time.Time) ([]Sample, error) {
	families, err := parseText(r)
	if err != nil {
		return nil, fmt.Errorf("parse resource metrics: %w", err)
	}
	byKey := map[containerKey]*Sample{}
	for _, name := range []string{metricCPU, metricWorkingSet, metricStartTime} {
		seen := map[containerKey]bool{}
		for _, m := range families[name].GetMetric() {
			key, err := seriesKey(m)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			if keep != nil && !keep(key.namespace) {
				continue
			}
			if seen[key] {
				return nil, fmt.Errorf("%s: %s given twice", name, key)
			}
			seen[key] = true
			// Working sets are bytes; CPU time and start time are seconds, kept as nanoseconds.
			unit := 1e9
			if name == metricWorkingSet {
				unit = 1
			}
			v, err := integer(m, unit)
			if err != nil {
				return nil, fmt.Errorf("%s of %s: %w", name, key, err)
			}
			s := byKey[key]
			if s == nil {
				if name == metricStartTime {
					continue
				}
				// The CPU family comes first, so its line dates the sample when there is one.
				s = &Sample{Namespace: key.namespace, Pod: key.pod, Container: key.container, At: stamp(m, now)}
				byKey[key] = s
			}
			switch name {
			case metricCPU:
				s.CPU = v
			case metricWorkingSet:
				s.WorkingSet = v
			case metricStartTime:
				s.StartedAt = time.Unix(0, v)
			}
		}
	}
	samples := make([]Sample, 0, len(byKey))
	for _, s := range byKey {
		samples = append(samples, *s)
	}
	slices.SortFunc(samples, func(a, b Sample) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Pod, b.Pod),
			strings.Compare(a.Container, b.Container))
	})
	return samples, nil
}

// parseText runs expfmt's text parser, turning a panic into an error: the input is untrusted and
// v0.70.0 still dereferences a nil metric on a "{}" line after a TYPE line (prometheus/common#922
// guarded only "{}" before any metric name).
func parseText(r io.Reader) (families map[string]*dto.MetricFamily, err error) {
	defer func() {
		if p := recover(); p != nil {
			families, err = nil, fmt.Errorf("malformed exposition (parser panicked: %v)", p)
		}
	}()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(r)
}

func (k containerKey) String() string { return k.namespace + "/" + k.pod + "/" + k.container }

// seriesKey reads a container series' identifying labels, each of which must be present and non-empty.
func seriesKey(m *dto.Metric) (containerKey, error) {
	var key containerKey
	for _, l := range m.GetLabel() {
		switch l.GetName() {
		case "namespace":
			key.namespace = l.GetValue()
		case "pod":
			key.pod = l.GetValue()
		case "container":
			key.container = l.GetValue()
		}
	}
	if key.namespace == "" || key.pod == "" || key.container == "" {
		return containerKey{}, errors.New("series without a namespace, pod or container label")
	}
	return key, nil
}

// integer returns a sample's value times unit, rounded. It refuses what a kubelet never reports:
// negative, NaN or infinite values, and values whose product overflows int64.
func integer(m *dto.Metric, unit float64) (int64, error) {
	var v float64
	switch {
	case m.Counter != nil:
		v = m.Counter.GetValue()
	case m.Gauge != nil:
		v = m.Gauge.GetValue()
	case m.Untyped != nil:
		v = m.Untyped.GetValue()
	default:
		return 0, errors.New("not a counter, gauge or untyped sample")
	}
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("invalid value %v", v)
	}
	// 2^63 is the least float64 above math.MaxInt64, which float64 cannot represent exactly.
	x := math.Round(v * unit)
	if x >= 0x1p63 {
		return 0, fmt.Errorf("value %v overflows int64", v)
	}
	return int64(x), nil
}

// stamp is a sample's exposition timestamp, or now when the line has none.
func stamp(m *dto.Metric, now time.Time) time.Time {
	if m.TimestampMs == nil {
		return now
	}
	return time.UnixMilli(m.GetTimestampMs())
}

// Kubelet reads nodes' /metrics/resource.
type Kubelet struct {
	client *http.Client
	now    func() time.Time
}

// KubeletConfig configures NewKubelet.
type KubeletConfig struct {
	// Rest is the controller's API client configuration: its credentials (bearer token, token file or
	// client certificate) authenticate to kubelets too.
	Rest *rest.Config
	// CAFile verifies kubelets' serving certificates; empty means the API server's CA of Rest.
	CAFile string
	// InsecureSkipVerify skips that verification (an operator's explicit choice for kubelets with
	// self-signed serving certificates; the default is to verify).
	InsecureSkipVerify bool
	// Timeout bounds one scrape (default 10 s).
	Timeout time.Duration
}

// NewKubelet builds a Kubelet that calls kubelets directly with Rest's credentials. It refuses a
// missing Rest, a negative Timeout, and CAFile together with InsecureSkipVerify (a contradiction).
func NewKubelet(cfg KubeletConfig) (*Kubelet, error) {
	switch {
	case cfg.Rest == nil:
		return nil, errors.New("kubelet client: no rest config")
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("kubelet client: negative timeout %v", cfg.Timeout)
	case cfg.CAFile != "" && cfg.InsecureSkipVerify:
		return nil, errors.New("kubelet client: a CA file and skipping verification exclude each other")
	}
	c := rest.CopyConfig(cfg.Rest)
	// The API server's name means nothing for a kubelet's certificate, and Rest's own Insecure is
	// no choice made for kubelets.
	c.TLSClientConfig.ServerName = ""
	c.TLSClientConfig.Insecure = cfg.InsecureSkipVerify
	if cfg.CAFile != "" || cfg.InsecureSkipVerify {
		// rest refuses a CA together with Insecure.
		c.TLSClientConfig.CAFile, c.TLSClientConfig.CAData = cfg.CAFile, nil
	}
	rt, err := rest.TransportFor(c)
	if err != nil {
		return nil, fmt.Errorf("kubelet client: %w", err)
	}
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = defaultScrapeTimeout
	}
	return &Kubelet{
		client: &http.Client{
			Transport: rt,
			Timeout:   timeout,
			// The transport adds our credentials to every request, so a redirect would hand them
			// to wherever the kubelet points; a redirect is answered as the non-200 it is.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		now: time.Now,
	}, nil
}

// Scrape reads one node's samples of the kept namespaces. The address is the node's InternalIP
// (else its first address of type ExternalIP, else Hostname), the port status.daemonEndpoints.kubeletEndpoint.Port;
// a node with neither is an error. A response other than 200 is an error naming the status; the body is read
// through a bound of maxResourceBody bytes, past which it is an error.
func (k *Kubelet) Scrape(ctx context.Context, node *corev1.Node, keep func(namespace string) bool) ([]Sample, error) {
	host, err := kubeletHost(node)
	if err != nil {
		return nil, err
	}
	url := "https://" + host + resourcePath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node.Name, err)
	}
	req.Header.Set("Accept", acceptText)
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("node %s: GET %s: %s", node.Name, url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResourceBody+1))
	if err != nil {
		return nil, fmt.Errorf("node %s: read %s: %w", node.Name, url, err)
	}
	if len(body) > maxResourceBody {
		return nil, fmt.Errorf("node %s: %s exceeds %d bytes", node.Name, url, maxResourceBody)
	}
	samples, err := ParseResource(bytes.NewReader(body), keep, k.now())
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node.Name, err)
	}
	return samples, nil
}

// kubeletHost is the host:port a node's kubelet serves on.
func kubeletHost(node *corev1.Node) (string, error) {
	port := node.Status.DaemonEndpoints.KubeletEndpoint.Port
	if port <= 0 {
		return "", fmt.Errorf("node %s: no kubelet port", node.Name)
	}
	var addr string
	for _, typ := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP, corev1.NodeHostName} {
		if i := slices.IndexFunc(node.Status.Addresses, func(a corev1.NodeAddress) bool {
			return a.Type == typ && a.Address != ""
		}); i >= 0 {
			addr = node.Status.Addresses[i].Address
			break
		}
	}
	if addr == "" {
		return "", fmt.Errorf("node %s: no InternalIP, ExternalIP or Hostname address", node.Name)
	}
	return net.JoinHostPort(addr, strconv.Itoa(int(port))), nil
}
