package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// requestCost is what a phase cost the API server, per claim.
type requestCost struct {
	claims int
	delta  map[string]float64
}

func costBetween(before, after map[string]float64, claims int) requestCost {
	d := map[string]float64{}
	for k, v := range after {
		if n := v - before[k]; n > 0 {
			d[k] = n
		}
	}
	return requestCost{claims: claims, delta: d}
}

// write prints the requests per claim, the most frequent first, and their total; WATCH
// requests are left out (a watch is long-lived; its count says nothing of the load).
func (c requestCost) write(w io.Writer, title string) {
	if c.claims == 0 || len(c.delta) == 0 {
		return
	}
	keys := slices.Collect(maps.Keys(c.delta))
	keys = slices.DeleteFunc(keys, func(k string) bool { return strings.HasPrefix(k, "WATCH") })
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(c.delta[b], c.delta[a]), cmp.Compare(a, b)) })
	total, writes := 0.0, 0.0
	var parts []string
	for _, k := range keys {
		per := c.delta[k] / float64(c.claims)
		total += per
		if !strings.HasPrefix(k, "GET") && !strings.HasPrefix(k, "LIST") {
			writes += per
		}
		if per >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %.2f", k, per))
		}
	}
	fmt.Fprintf(w, "\n%s: **%.1f API requests per claim, %.1f of them writes** (apiserver_request_total): %s\n", title, total, writes, strings.Join(parts, ", "))
}

// eventSources counts the namespace's Events by "component reason" (their counts
// included: an aggregated Event stands for several), the most frequent first, with a
// Warning's last message.
func eventSources(ctx context.Context, kube kubernetes.Interface, ns string) (string, error) {
	list, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	n := map[string]int32{}
	sample := map[string]string{}
	for _, e := range list.Items {
		k := e.Source.Component + " " + e.Reason
		if e.Source.Component == "" {
			k = e.ReportingController + " " + e.Reason
		}
		n[k] += max(e.Count, 1)
		if e.Type == "Warning" {
			sample[k] = e.Message
		}
	}
	keys := slices.Collect(maps.Keys(n))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(n[b], n[a]), cmp.Compare(a, b)) })
	var parts []string
	for _, k := range keys {
		if m := sample[k]; m != "" {
			parts = append(parts, fmt.Sprintf("%s %d (%q)", k, n[k], m))
		} else {
			parts = append(parts, fmt.Sprintf("%s %d", k, n[k]))
		}
	}
	return strings.Join(parts, ", "), nil
}
