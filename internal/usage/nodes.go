package usage

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// nodeTTL is how long a node's addresses are trusted before they are read again: a node's
// address and kubelet port change only when it is replaced, and a stale one costs one
// failed scrape.
const nodeTTL = 5 * time.Minute

// NodeGetter returns a Node lookup for Recorder.Node: one GET per node per nodeTTL, so
// the controller needs get on nodes, not a watch of every node's heartbeats.
func NodeGetter(client kubernetes.Interface, now func() time.Time) func(ctx context.Context, name string) (*corev1.Node, error) {
	type entry struct {
		node *corev1.Node
		at   time.Time
	}
	var mu sync.Mutex
	nodes := map[string]entry{}
	return func(ctx context.Context, name string) (*corev1.Node, error) {
		mu.Lock()
		e, ok := nodes[name]
		mu.Unlock()
		if ok && now().Sub(e.at) < nodeTTL {
			return e.node, nil
		}
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		slim := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}, Status: corev1.NodeStatus{
			Addresses: n.Status.Addresses, DaemonEndpoints: n.Status.DaemonEndpoints}}
		mu.Lock()
		nodes[name] = entry{node: slim, at: now()}
		mu.Unlock()
		return slim, nil
	}
}
