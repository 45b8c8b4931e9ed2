package kube

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/execplane/execplane/internal/logging"
)

// EndpointManager is the value of the EndpointSlice label
// endpointslice.kubernetes.io/managed-by on the slice the leader publishes: the Kubernetes
// controllers that publish slices leave a slice of another manager alone.
const EndpointManager = "execplane-controller"

// Kubernetes' own publishers of a Service's EndpointSlices. Neither publishes anything for a
// Service without a selector, but neither removes what it published while the Service had
// one (kubernetes/kubernetes#118376): those are the leftovers PublishLeaderEndpoint removes.
const (
	// sliceController publishes the ready Pods of a Service's selector.
	sliceController = "endpointslice-controller.k8s.io"
	// mirrorController mirrors a selector-less Service's core/v1 Endpoints object into
	// slices, for as long as that object exists.
	mirrorController = "endpointslicemirroring-controller.k8s.io"
)

// Bounds of the publication loop.
const (
	// publishAttempts bounds one pass's compare-and-swap retries: each conflict re-reads
	// the slice, and a writer that wins more often than this is another leader, whose own
	// loop ends when its Lease is gone.
	publishAttempts = 5
	// publishBackoffMin and publishBackoffMax bound the wait after a failed pass (the
	// API server unreachable, the Service missing): short first, so a takeover is published
	// at once, and capped so that a fixed problem is published soon after.
	publishBackoffMin = 100 * time.Millisecond
	publishBackoffMax = 30 * time.Second
	// DefaultEndpointResync is how often the leader checks its slice even when no event
	// says it changed.
	DefaultEndpointResync = time.Minute
	// withdrawTimeout bounds the withdrawal when leadership ends (one read, one write): a
	// stopping replica does not wait on an API server that does not answer; its successor
	// overwrites the slice anyway.
	withdrawTimeout = 2 * time.Second
)

// LeaderEndpoint configures PublishLeaderEndpoint: this replica's address as the only
// endpoint of a selector-less Service.
type LeaderEndpoint struct {
	// Client reads and writes the Service's EndpointSlices (the binary's work client).
	Client kubernetes.Interface
	// Namespace and Service name the selector-less Service; the slice takes the Service's
	// name (the Kubernetes controllers name theirs with a random suffix).
	Namespace, Service string
	// Address is this replica's Pod IP.
	Address string
	// PortName and Port: the Service's port named PortName reaches this replica on Port.
	PortName string
	Port     int32
	// Pod names this replica's Pod in the endpoint's targetRef; empty: no targetRef.
	Pod string
	// Resync: the slice is checked this often even without an event (DefaultEndpointResync
	// when 0).
	Resync time.Duration
	// Published is told after every pass whether the slice is this replica's (may be nil).
	Published func(bool)
	// Logger reports the passes that fail.
	Logger hclog.Logger
}

// validate reports every problem of the configuration at once.
func (e LeaderEndpoint) validate() error {
	var errs []error
	if e.Client == nil || e.Logger == nil {
		errs = append(errs, errors.New("a client and a logger are required"))
	}
	if msgs := validation.IsDNS1123Label(e.Namespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("namespace %q: %v", e.Namespace, msgs))
	}
	if msgs := validation.IsDNS1035Label(e.Service); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("service %q: %v", e.Service, msgs))
	}
	if err := CheckEndpointAddress(e.Address); err != nil {
		errs = append(errs, err)
	}
	if msgs := validation.IsValidPortName(e.PortName); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("port name %q: %v", e.PortName, msgs))
	}
	if msgs := validation.IsValidPortNum(int(e.Port)); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("port %d: %v", e.Port, msgs))
	}
	if e.Pod != "" {
		if msgs := validation.IsDNS1123Subdomain(e.Pod); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("pod %q: %v", e.Pod, msgs))
		}
	}
	return errors.Join(errs...)
}

// CheckEndpointAddress refuses an address the API server refuses in an EndpointSlice: not
// an IP, or the unspecified, a loopback or a link-local one (no Pod has such an IP).
func CheckEndpointAddress(address string) error {
	ip, err := netip.ParseAddr(address)
	switch {
	case err != nil || ip.Zone() != "":
		return fmt.Errorf("address %q is not an IP address", address)
	case ip.IsUnspecified(), ip.IsLoopback(), ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return fmt.Errorf("address %q is unspecified, loopback or link-local: no endpoint can have it", address)
	}
	return nil
}

// Slice is the EndpointSlice the leader publishes for the Service: one endpoint, this
// replica, ready, serving one port; owned by the Service (so that deleting it deletes the
// slice), never by a controller reference that would make the garbage collector wait.
func (e LeaderEndpoint) Slice(svc *corev1.Service) *discoveryv1.EndpointSlice {
	ip := netip.MustParseAddr(e.Address) // validated
	addressType := discoveryv1.AddressTypeIPv4
	if ip.Unmap().Is6() {
		addressType = discoveryv1.AddressTypeIPv6
	}
	endpoint := discoveryv1.Endpoint{
		Addresses:  []string{ip.Unmap().String()},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
	}
	if e.Pod != "" {
		endpoint.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: e.Namespace, Name: e.Pod}
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      e.Service,
			Namespace: e.Namespace,
			Labels:    map[string]string{discoveryv1.LabelServiceName: e.Service, discoveryv1.LabelManagedBy: EndpointManager},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID,
			}},
		},
		AddressType: addressType,
		Endpoints:   []discoveryv1.Endpoint{endpoint},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(e.PortName), Port: ptr.To(e.Port), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
}

// upToDate reports whether have publishes exactly what want does: its labels (others may
// be added beside them), owner, address type, endpoints and ports.
func upToDate(have, want *discoveryv1.EndpointSlice) bool {
	for k, v := range want.Labels {
		if have.Labels[k] != v {
			return false
		}
	}
	return apiequality.Semantic.DeepEqual(have.OwnerReferences, want.OwnerReferences) &&
		have.AddressType == want.AddressType &&
		apiequality.Semantic.DeepEqual(have.Endpoints, want.Endpoints) &&
		apiequality.Semantic.DeepEqual(have.Ports, want.Ports)
}

// ErrServiceHasSelector refuses to publish for a Service with a selector: the endpoint
// controller publishes its ready Pods, every replica among them, and a slice of the leader
// beside theirs would not make it the only endpoint.
var ErrServiceHasSelector = errors.New("the Service has a selector: its ready Pods are its endpoints, not the leader alone")

// publish makes the Service's slice this replica's: a create, or an update carrying the
// resourceVersion it read (a compare-and-swap; on a conflict it reads again). have is the
// slice as last seen (nil: none seen). It reports whether it wrote.
func (e LeaderEndpoint) publish(ctx context.Context, have *discoveryv1.EndpointSlice, svc *corev1.Service) (bool, error) {
	slices := e.Client.DiscoveryV1().EndpointSlices(e.Namespace)
	want := e.Slice(svc)
	for range publishAttempts {
		var err error
		switch {
		case have == nil:
			if _, err = slices.Create(ctx, want, metav1.CreateOptions{}); err == nil {
				return true, nil
			}
			if !apierrors.IsAlreadyExists(err) {
				return false, fmt.Errorf("creating EndpointSlice %s: %w", want.Name, err)
			}
		case upToDate(have, want):
			return false, nil
		case have.AddressType != want.AddressType:
			// The address type is immutable: the slice is replaced, exactly the one read.
			pre := metav1.Preconditions{UID: &have.UID, ResourceVersion: &have.ResourceVersion}
			err = slices.Delete(ctx, have.Name, metav1.DeleteOptions{Preconditions: &pre})
			if err == nil || apierrors.IsNotFound(err) {
				have = nil
				continue
			}
			if !apierrors.IsConflict(err) {
				return false, fmt.Errorf("replacing EndpointSlice %s of another address type: %w", have.Name, err)
			}
		default:
			next := have.DeepCopy() // keeps its resourceVersion: the update is a compare-and-swap
			if next.Labels == nil {
				next.Labels = map[string]string{}
			}
			for k, v := range want.Labels {
				next.Labels[k] = v
			}
			next.OwnerReferences, next.Endpoints, next.Ports = want.OwnerReferences, want.Endpoints, want.Ports
			if _, err = slices.Update(ctx, next, metav1.UpdateOptions{}); err == nil {
				return true, nil
			}
			if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("updating EndpointSlice %s: %w", want.Name, err)
			}
		}
		// Someone else wrote first: read what is there now, then decide again.
		if have, err = slices.Get(ctx, want.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			have = nil
		} else if err != nil {
			return false, fmt.Errorf("reading EndpointSlice %s: %w", want.Name, err)
		}
	}
	return false, fmt.Errorf("EndpointSlice %s: still changed by another writer after %d attempts", want.Name, publishAttempts)
}

// removeLeftovers deletes the slices Kubernetes' controllers published for the Service
// while it had a selector (the chart's Services before the leader published its endpoint):
// they name Pods that are not the leader, and nothing else ever removes them. A mirrored
// slice is removed with the Endpoints object it mirrors, which the endpoints controller
// left behind for the same reason. Each slice is deleted only as it was read (its UID).
func (e LeaderEndpoint) removeLeftovers(ctx context.Context, seen []*discoveryv1.EndpointSlice) (int, error) {
	removed := 0
	for _, s := range seen {
		manager := s.Labels[discoveryv1.LabelManagedBy]
		if s.Name == e.Service || (manager != sliceController && manager != mirrorController) {
			continue
		}
		if manager == mirrorController {
			err := e.Client.CoreV1().Endpoints(e.Namespace).Delete(ctx, e.Service, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return removed, fmt.Errorf("deleting the Endpoints the EndpointSlice %s mirrors: %w", s.Name, err)
			}
		}
		err := e.Client.DiscoveryV1().EndpointSlices(e.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}})
		switch {
		case err == nil:
			removed++
		case !apierrors.IsNotFound(err) && !apierrors.IsConflict(err):
			return removed, fmt.Errorf("deleting the leftover EndpointSlice %s: %w", s.Name, err)
		}
	}
	return removed, nil
}

// labelsOfService selects the EndpointSlices of the Service, whoever published them.
func labelsOfService(service string) labels.Selector {
	return labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: service})
}

// sliceView lists EndpointSlices as last seen (the informer's cache of the Service's).
type sliceView interface {
	List(selector labels.Selector) ([]*discoveryv1.EndpointSlice, error)
}

// pass is one check: the Service read live, the Service's slices as the cache shows them.
func (e LeaderEndpoint) pass(ctx context.Context, lister sliceView) error {
	svc, err := e.Client.CoreV1().Services(e.Namespace).Get(ctx, e.Service, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading Service %s: %w", e.Service, err)
	}
	if len(svc.Spec.Selector) > 0 {
		return ErrServiceHasSelector
	}
	all, err := lister.List(labelsOfService(e.Service))
	if err != nil {
		return err
	}
	var have *discoveryv1.EndpointSlice
	for _, s := range all {
		if s.Name == e.Service {
			have = s
		}
	}
	wrote, err := e.publish(ctx, have, svc)
	if err != nil {
		return err
	}
	if wrote {
		e.Logger.Info("published the leader endpoint", logging.KeyAddress, e.Address, logging.KeyNamespace, e.Namespace)
	}
	removed, err := e.removeLeftovers(ctx, all)
	if removed > 0 {
		e.Logger.Info("removed the Service's EndpointSlices of other publishers", logging.KeyCount, removed)
	}
	return err
}

// PublishLeaderEndpoint makes this replica the only endpoint of the selector-less Service
// until ctx ends, and keeps it so: every change of the Service's slices (a slice edited,
// deleted or added) and every resync runs a pass that rewrites the slice when it differs
// and removes the slices Kubernetes' controllers left from when the Service had a selector.
// A pass that fails is retried with backoff. When ctx ends it withdraws this replica's
// endpoint (withdraw) but keeps the slice: a successor overwrites it. Only an invalid
// configuration is an error.
func PublishLeaderEndpoint(ctx context.Context, e LeaderEndpoint) error {
	if err := e.validate(); err != nil {
		return fmt.Errorf("leader endpoint: %w", err)
	}
	if e.Resync <= 0 {
		e.Resync = DefaultEndpointResync
	}
	published := func(ok bool) {
		if e.Published != nil {
			e.Published(ok)
		}
	}
	factory := informers.NewSharedInformerFactoryWithOptions(e.Client, e.Resync, informers.WithNamespace(e.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = labelsOfService(e.Service).String() }))
	slices := factory.Discovery().V1().EndpointSlices()
	changed := make(chan struct{}, 1)
	kick := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := slices.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { kick() }, UpdateFunc: func(any, any) { kick() }, DeleteFunc: func(any) { kick() },
	}); err != nil {
		return fmt.Errorf("leader endpoint: %w", err)
	}
	lister := slices.Lister().EndpointSlices(e.Namespace)
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	defer e.withdraw(context.WithoutCancel(ctx))
	if !cache.WaitForCacheSync(ctx.Done(), slices.Informer().HasSynced) {
		return nil
	}
	backoff := publishBackoffMin
	for {
		var retry <-chan time.Time
		if err := e.pass(ctx, lister); err != nil {
			published(false)
			if ctx.Err() != nil {
				return nil
			}
			e.Logger.Warn("publishing the leader endpoint failed; retrying", logging.KeyError, err, logging.KeyDuration, backoff)
			retry = time.After(backoff)
			backoff = min(2*backoff, publishBackoffMax)
		} else {
			published(true)
			backoff = publishBackoffMin
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-retry:
		}
	}
}

// withdraw empties the slice if it still names this replica, as it was read (a
// compare-and-swap: a successor's slice is never touched). Between a leader's end and its
// successor's publication the Service then has no endpoint, and kube-proxy refuses new
// connections to it at once, so that the gateways' reconnections fail fast and retry,
// instead of waiting out a connection timeout against an address about to vanish (which
// the node's connection tracking keeps sending a connection's retries to).
func (e LeaderEndpoint) withdraw(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, withdrawTimeout)
	defer cancel()
	api := e.Client.DiscoveryV1().EndpointSlices(e.Namespace)
	have, err := api.Get(ctx, e.Service, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		e.Logger.Warn("withdrawing the leader endpoint: reading the slice failed", logging.KeyError, err)
		return
	}
	if !e.names(have) {
		return // empty already, or a successor's
	}
	next := have.DeepCopy() // keeps its resourceVersion
	next.Endpoints = nil
	_, err = api.Update(ctx, next, metav1.UpdateOptions{})
	switch {
	case err == nil:
		e.Logger.Info("withdrew the leader endpoint", logging.KeyAddress, e.Address, logging.KeyNamespace, e.Namespace)
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		// Written since it was read: a successor's publication, left alone.
	default:
		e.Logger.Warn("withdrawing the leader endpoint failed", logging.KeyError, err)
	}
}

// names reports whether s has this replica's address among its endpoints.
func (e LeaderEndpoint) names(s *discoveryv1.EndpointSlice) bool {
	want := netip.MustParseAddr(e.Address).Unmap().String() // validated
	for _, ep := range s.Endpoints {
		if slices.Contains(ep.Addresses, want) {
			return true
		}
	}
	return false
}
