package devcluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/client-go/kubernetes"
)

// RequestCounts is the API server's own apiserver_request_total, summed by "VERB
// resource[/subresource]" over codes, scopes and components.
func RequestCounts(ctx context.Context, kube kubernetes.Interface) (map[string]float64, error) {
	body, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("the API server's metrics: %w", err)
	}
	out := map[string]float64{}
	for line := range strings.SplitSeq(string(body), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		labels := map[string]string{}
		for kv := range strings.SplitSeq(line[len("apiserver_request_total{"):strings.LastIndex(line, "}")], ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				labels[k] = strings.Trim(v, `"`)
			}
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return nil, err
		}
		key := labels["verb"] + " " + labels["resource"]
		if s := labels["subresource"]; s != "" {
			key += "/" + s
		}
		out[key] += v
	}
	return out, nil
}
