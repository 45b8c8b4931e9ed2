package kube

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
)

const (
	testNamespace = "execplane"
	testService   = "execplane-controller"
)

var slicesResource = schema.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}

// selectorless is the chart's controller Service: no selector, one port named control.
func selectorless() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: testService, Namespace: testNamespace, UID: "svc-uid"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "control", Port: 9443}}},
	}
}

func endpointOf(address, pod string) LeaderEndpoint {
	return LeaderEndpoint{
		Namespace: testNamespace, Service: testService, Address: address,
		PortName: "control", Port: 9443, Pod: pod, Logger: hclog.NewNullLogger(),
	}
}

// apiServer is a fake clientset that keeps the API server's promises the code relies on:
// every write gets a new resourceVersion, an update carrying another one is a Conflict, a
// delete with a UID or resourceVersion precondition that does not hold is a Conflict.
// (client-go's fake tracker keeps none of them.) It counts the writes to EndpointSlices.
type apiServer struct {
	*fake.Clientset
	mu     sync.Mutex
	rv     int
	writes []string // "create <name>", "update <name>@<rv>", "delete <name>"
}

func newAPIServer(objects ...runtime.Object) *apiServer {
	s := &apiServer{Clientset: fake.NewClientset(objects...), rv: 100}
	tracker := s.Tracker()
	s.PrependReactor("create", "endpointslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.CreateAction).GetObject().(*discoveryv1.EndpointSlice).DeepCopy()
		s.mu.Lock()
		defer s.mu.Unlock()
		s.rv++
		obj.ResourceVersion, obj.UID = strconv.Itoa(s.rv), types.UID("uid-"+strconv.Itoa(s.rv))
		if err := tracker.Create(slicesResource, obj, obj.Namespace); err != nil {
			return true, nil, err
		}
		s.writes = append(s.writes, "create "+obj.Name)
		return true, obj, nil
	})
	s.PrependReactor("update", "endpointslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.UpdateAction).GetObject().(*discoveryv1.EndpointSlice).DeepCopy()
		s.mu.Lock()
		defer s.mu.Unlock()
		cur, err := tracker.Get(slicesResource, obj.Namespace, obj.Name)
		if err != nil {
			return true, nil, err
		}
		curSlice := cur.(*discoveryv1.EndpointSlice)
		if obj.ResourceVersion != curSlice.ResourceVersion {
			return true, nil, apierrors.NewConflict(slicesResource.GroupResource(), obj.Name, errors.New("the object has been modified"))
		}
		if obj.AddressType != curSlice.AddressType {
			return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: "discovery.k8s.io", Kind: "EndpointSlice"}, obj.Name, nil)
		}
		s.writes = append(s.writes, "update "+obj.Name+"@"+obj.ResourceVersion)
		s.rv++
		obj.ResourceVersion, obj.UID = strconv.Itoa(s.rv), curSlice.UID
		return true, obj, tracker.Update(slicesResource, obj, obj.Namespace)
	})
	s.PrependReactor("delete", "endpointslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.DeleteAction)
		s.mu.Lock()
		defer s.mu.Unlock()
		cur, err := tracker.Get(slicesResource, d.GetNamespace(), d.GetName())
		if err != nil {
			return true, nil, err
		}
		curSlice := cur.(*discoveryv1.EndpointSlice)
		if pre := d.GetDeleteOptions().Preconditions; pre != nil {
			if (pre.UID != nil && *pre.UID != curSlice.UID) || (pre.ResourceVersion != nil && *pre.ResourceVersion != curSlice.ResourceVersion) {
				return true, nil, apierrors.NewConflict(slicesResource.GroupResource(), d.GetName(), errors.New("precondition failed"))
			}
		}
		s.writes = append(s.writes, "delete "+d.GetName())
		return true, nil, tracker.Delete(slicesResource, d.GetNamespace(), d.GetName())
	})
	return s
}

// put stores a slice as another writer would (a new resourceVersion, no write counted).
func (s *apiServer) put(t *testing.T, slice *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	t.Helper()
	slice = slice.DeepCopy()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	slice.ResourceVersion = strconv.Itoa(s.rv)
	if slice.UID == "" {
		slice.UID = types.UID("uid-" + slice.ResourceVersion)
	}
	var err error
	if _, getErr := s.Tracker().Get(slicesResource, slice.Namespace, slice.Name); getErr == nil {
		err = s.Tracker().Update(slicesResource, slice, slice.Namespace)
	} else {
		err = s.Tracker().Create(slicesResource, slice, slice.Namespace)
	}
	if err != nil {
		t.Fatal(err)
	}
	return slice
}

func (s *apiServer) slice(t *testing.T, name string) *discoveryv1.EndpointSlice {
	t.Helper()
	got, err := s.DiscoveryV1().EndpointSlices(testNamespace).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func (s *apiServer) takeWrites() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.writes
	s.writes = nil
	return w
}

// The published slice names the Service, this replica's address, its Pod and the control
// port, ready; the Service owns it (garbage collected with it) without blocking its deletion.
func TestSliceIsTheLeaderAlone(t *testing.T) {
	want := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: testService, Namespace: testNamespace,
			Labels: map[string]string{
				"kubernetes.io/service-name":             testService,
				"endpointslice.kubernetes.io/managed-by": "execplane-controller",
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: testService, UID: "svc-uid"}},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"10.244.1.7"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: testNamespace, Name: "execplane-controller-7c9-abcde"},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("control"), Port: ptr.To[int32](9443), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if diff := cmp.Diff(want, endpointOf("10.244.1.7", "execplane-controller-7c9-abcde").Slice(selectorless())); diff != "" {
		t.Errorf("IPv4 (-want +got):\n%s", diff)
	}
	v6 := endpointOf("fd00:10:244::7", "")
	got := v6.Slice(selectorless())
	if got.AddressType != discoveryv1.AddressTypeIPv6 || got.Endpoints[0].Addresses[0] != "fd00:10:244::7" || got.Endpoints[0].TargetRef != nil {
		t.Errorf("IPv6 without a Pod name: %s %v %v", got.AddressType, got.Endpoints[0].Addresses, got.Endpoints[0].TargetRef)
	}
	// An IPv4-mapped IPv6 form is the IPv4 address.
	if got := endpointOf("::ffff:10.244.1.7", "").Slice(selectorless()); got.AddressType != discoveryv1.AddressTypeIPv4 || got.Endpoints[0].Addresses[0] != "10.244.1.7" {
		t.Errorf("mapped: %s %v", got.AddressType, got.Endpoints[0].Addresses)
	}
}

// Each pass writes only when the slice is not this replica's, and every write is a create
// or an update carrying the resourceVersion read: a writer that came between is never
// overwritten blind.
func TestPublishIsCreateOrCompareAndSwap(t *testing.T) {
	ctx := t.Context()
	oldLeader := endpointOf("10.244.2.9", "execplane-controller-old").Slice(selectorless())
	cases := []struct {
		name string
		// before is what is stored; read is what the pass believes it read (nil: none).
		before, read func(s *apiServer) *discoveryv1.EndpointSlice
		want         []string
	}{
		{
			name:   "none: created",
			before: func(*apiServer) *discoveryv1.EndpointSlice { return nil },
			want:   []string{"create " + testService},
		},
		{
			name:   "the old leader's: updated at the version read",
			before: func(s *apiServer) *discoveryv1.EndpointSlice { return s.put(t, oldLeader) },
			want:   []string{"update " + testService + "@101"},
		},
		{
			name: "already this replica's: nothing written",
			before: func(s *apiServer) *discoveryv1.EndpointSlice {
				return s.put(t, endpointOf("10.244.1.7", "pod-a").Slice(selectorless()))
			},
			want: nil,
		},
		{
			name: "changed since it was read: the update conflicts, the pass reads again and updates that",
			before: func(s *apiServer) *discoveryv1.EndpointSlice {
				read := s.put(t, oldLeader)
				changed := read.DeepCopy()
				changed.Endpoints[0].Addresses = []string{"10.244.3.3"}
				s.put(t, changed)
				return read
			},
			want: []string{"update " + testService + "@102"},
		},
		{
			name: "created by another since none was seen: the create conflicts, the pass updates what is there",
			before: func(s *apiServer) *discoveryv1.EndpointSlice {
				s.put(t, oldLeader)
				return nil
			},
			want: []string{"update " + testService + "@101"},
		},
		{
			name: "another address type (immutable): that slice deleted, then created",
			before: func(s *apiServer) *discoveryv1.EndpointSlice {
				return s.put(t, endpointOf("fd00::9", "pod-b").Slice(selectorless()))
			},
			want: []string{"delete " + testService, "create " + testService},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newAPIServer()
			e := endpointOf("10.244.1.7", "pod-a")
			e.Client = s
			read := tc.before(s)
			s.takeWrites()
			wrote, err := e.publish(ctx, read, selectorless())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, s.takeWrites()); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			if wrote != (len(tc.want) > 0) {
				t.Errorf("wrote = %v", wrote)
			}
			if got := s.slice(t, testService); !upToDate(got, e.Slice(selectorless())) {
				t.Errorf("the slice is not this replica's: %+v", got)
			}
		})
	}

	// Labels others added stay.
	s := newAPIServer()
	e := endpointOf("10.244.1.7", "pod-a")
	e.Client = s
	labelled := oldLeader.DeepCopy()
	labelled.Labels["team"] = "platform"
	if _, err := e.publish(ctx, s.put(t, labelled), selectorless()); err != nil {
		t.Fatal(err)
	}
	if got := s.slice(t, testService).Labels["team"]; got != "platform" {
		t.Errorf("another writer's label was dropped: %q", got)
	}

	// A writer that always comes between is given up on, with an error, after a few tries.
	s = newAPIServer()
	e.Client = s
	s.put(t, oldLeader)
	s.PrependReactor("update", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(slicesResource.GroupResource(), testService, errors.New("modified"))
	})
	if _, err := e.publish(ctx, nil, selectorless()); err == nil {
		t.Error("endless conflicts reported no error")
	}
}

// The slices Kubernetes' controllers published while the Service had a selector are removed
// with the Endpoints object a mirrored one comes from; a slice of any other publisher is not
// this replica's to remove. Under a Service with a selector nothing is written or removed.
func TestPassRemovesTheSelectorsLeftovers(t *testing.T) {
	leftover := func(name, manager, ip string) *discoveryv1.EndpointSlice {
		s := endpointOf(ip, "").Slice(selectorless())
		s.Name, s.OwnerReferences = name, nil
		s.Labels[discoveryv1.LabelManagedBy] = manager
		return s
	}
	//lint:ignore SA1019 the object an old chart's Service left behind
	endpoints := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: testService, Namespace: testNamespace}}
	for _, withSelector := range []bool{false, true} {
		t.Run(fmt.Sprintf("selector %v", withSelector), func(t *testing.T) {
			svc := selectorless()
			if withSelector {
				svc.Spec.Selector = map[string]string{"app.kubernetes.io/component": "controller"}
			}
			s := newAPIServer(svc, endpoints)
			for _, l := range []*discoveryv1.EndpointSlice{
				leftover(testService+"-x7k2p", "endpointslice-controller.k8s.io", "10.244.2.9"),
				leftover(testService+"-m4q8z", "endpointslicemirroring-controller.k8s.io", "10.244.2.9"),
				leftover(testService+"-mesh", "mesh.example.com", "10.244.5.5"),
			} {
				s.put(t, l)
			}
			e := endpointOf("10.244.1.7", "pod-a")
			e.Client = s
			all, err := s.DiscoveryV1().EndpointSlices(testNamespace).List(t.Context(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			lister := sliceLister(all.Items)
			err = e.pass(t.Context(), lister)
			writes := s.takeWrites()
			_, endpointsErr := s.CoreV1().Endpoints(testNamespace).Get(t.Context(), testService, metav1.GetOptions{})
			if withSelector {
				if !errors.Is(err, ErrServiceHasSelector) || len(writes) != 0 || endpointsErr != nil {
					t.Fatalf("under a selector: %v, writes %v, Endpoints %v", err, writes, endpointsErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"create " + testService, "delete " + testService + "-m4q8z", "delete " + testService + "-x7k2p"}
			if diff := cmp.Diff(want, writes); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			if !apierrors.IsNotFound(endpointsErr) {
				t.Errorf("the mirrored Endpoints object is left: %v", endpointsErr)
			}
		})
	}
}

// The leader's loop publishes at once, puts its slice back whenever another writer changes
// or deletes it, tells each outcome, and stops with its context — leaving the slice for the
// next leader to overwrite.
func TestPublishLeaderEndpointKeepsItsSlice(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := newAPIServer(selectorless())
	var published atomic.Bool
	e := endpointOf("10.244.1.7", "pod-a")
	e.Client, e.Published = s, published.Store
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- PublishLeaderEndpoint(ctx, e) }()

	mine := func() bool {
		got, err := s.DiscoveryV1().EndpointSlices(testNamespace).Get(ctx, testService, metav1.GetOptions{})
		return err == nil && upToDate(got, e.Slice(selectorless()))
	}
	eventually(t, "published", func() bool { return mine() && published.Load() })

	// Another writer points it elsewhere: put back.
	other := s.slice(t, testService)
	other.Endpoints[0].Addresses = []string{"10.244.9.9"}
	s.put(t, other)
	eventually(t, "put back after a change", mine)
	// Deleted: created again.
	if err := s.Tracker().Delete(slicesResource, testNamespace, testService); err != nil {
		t.Fatal(err)
	}
	eventually(t, "created again after a delete", mine)

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the loop outlived its context")
	}
	// The leadership over, the slice stays (a successor overwrites it) but names nobody:
	// new connections to the Service are refused at once rather than sent to this replica.
	got, err := s.DiscoveryV1().EndpointSlices(testNamespace).Get(t.Context(), testService, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the slice did not outlive the leadership: %v", err)
	}
	if len(got.Endpoints) != 0 {
		t.Errorf("the endpoint was not withdrawn: %+v", got.Endpoints)
	}
}

// The withdrawal is a compare-and-swap of this replica's slice: a successor's is left as it
// is, and so is a slice written between the read and the write.
func TestWithdrawLeavesASuccessorsSlice(t *testing.T) {
	s := newAPIServer(selectorless())
	mine, successor := endpointOf("10.244.1.7", "pod-a"), endpointOf("10.244.1.8", "pod-b")
	mine.Client, successor.Client = s, s
	if _, err := successor.publish(t.Context(), nil, selectorless()); err != nil {
		t.Fatal(err)
	}
	s.takeWrites()
	mine.withdraw(t.Context())
	if got, w := s.slice(t, testService), s.takeWrites(); !upToDate(got, successor.Slice(selectorless())) || len(w) != 0 {
		t.Errorf("a successor's slice was changed: %+v (writes %v)", got.Endpoints, w)
	}
	// This replica's slice, changed by someone between the read and the write: a conflict,
	// and nothing more is written.
	if _, err := mine.publish(t.Context(), s.slice(t, testService), selectorless()); err != nil {
		t.Fatal(err)
	}
	s.PrependReactor("update", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(slicesResource.GroupResource(), testService, errors.New("changed"))
	})
	mine.withdraw(t.Context())
	if got := s.slice(t, testService); !upToDate(got, mine.Slice(selectorless())) {
		t.Errorf("the slice changed after a conflict: %+v", got.Endpoints)
	}
}

// Without the Service there is nothing to publish for: the outcome says so and the loop
// retries; a bad address is refused before anything starts.
func TestPublishLeaderEndpointRefusesAndRetries(t *testing.T) {
	e := endpointOf("127.0.0.1", "")
	e.Client = newAPIServer()
	if err := PublishLeaderEndpoint(t.Context(), e); err == nil {
		t.Error("a loopback address was accepted")
	}
	s := newAPIServer()
	var outcomes atomic.Int32
	e = endpointOf("10.244.1.7", "")
	e.Client, e.Published = s, func(ok bool) {
		if !ok {
			outcomes.Add(1)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- PublishLeaderEndpoint(ctx, e) }()
	eventually(t, "two failed passes", func() bool { return outcomes.Load() >= 2 })
	if _, err := s.Tracker().Get(slicesResource, testNamespace, testService); !apierrors.IsNotFound(err) {
		t.Errorf("a slice was published for a missing Service: %v", err)
	}
	if _, err := s.CoreV1().Services(testNamespace).Create(ctx, selectorless(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "published once the Service exists", func() bool {
		_, err := s.Tracker().Get(slicesResource, testNamespace, testService)
		return err == nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// sliceLister serves the pass a fixed view of the slices.
type sliceLister []discoveryv1.EndpointSlice

func (l sliceLister) List(selector labels.Selector) ([]*discoveryv1.EndpointSlice, error) {
	var out []*discoveryv1.EndpointSlice
	for i := range l {
		if selector.Matches(labels.Set(l[i].Labels)) {
			out = append(out, &l[i])
		}
	}
	return out, nil
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	clustertest.Eventually(t, 10*time.Second, what, cond)
}
