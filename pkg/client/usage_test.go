package client

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	"github.com/execplane/execplane/proto/execution/v1/executionv1grpc"
)

// usageGateway answers GetUsage with a fixed ledger and ListUsage from pages keyed by page
// token, recording every request it receives; the first attempt of each call named in fail
// fails before an answer (a reset connection).
type usageGateway struct {
	executionv1grpc.UnimplementedExecutionProviderServiceServer
	pages map[string]*executionv1.ListUsageResponse

	mu       sync.Mutex
	fail     map[string]bool // "GetUsage", or "ListUsage:<token>"
	gets     []*executionv1.GetUsageRequest
	lists    []*executionv1.ListUsageRequest
	refusals []error // answered in turn to ListUsage before its pages
}

func (g *usageGateway) failFirst(key string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fail[key] {
		delete(g.fail, key)
		return status.Error(codes.Unavailable, "connection reset") // no ErrorInfo: no answer from execplane
	}
	return nil
}

var usageLedger = &executionv1.GetUsageResponse{Environment: testEnv.GetRef(), BindingId: "conv-1", Profile: "sandbox",
	Totals: &executionv1.UsageCounters{CpuNanoseconds: 1_500_000_000, Commands: 3}, OwnerHash: "ab12", ClientHash: "cd34",
	Windows: []*executionv1.UsageWindow{{Start: timestamppb.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)),
		End: timestamppb.New(time.Date(2026, 11, 30, 13, 0, 0, 0, time.UTC)), Usage: &executionv1.UsageCounters{Commands: 3}, Closed: true}}}

func (g *usageGateway) GetUsage(_ context.Context, r *executionv1.GetUsageRequest) (*executionv1.GetUsageResponse, error) {
	g.mu.Lock()
	g.gets = append(g.gets, r)
	g.mu.Unlock()
	if err := g.failFirst("GetUsage"); err != nil {
		return nil, err
	}
	return usageLedger, nil
}

func (g *usageGateway) ListUsage(_ context.Context, r *executionv1.ListUsageRequest) (*executionv1.ListUsageResponse, error) {
	g.mu.Lock()
	g.lists = append(g.lists, r)
	if len(g.refusals) > 0 {
		err := g.refusals[0]
		g.refusals = g.refusals[1:]
		g.mu.Unlock()
		return nil, err
	}
	g.mu.Unlock()
	if err := g.failFirst("ListUsage:" + r.GetPageToken()); err != nil {
		return nil, err
	}
	page, ok := g.pages[r.GetPageToken()]
	if !ok {
		return nil, status.Error(codes.InvalidArgument, "not a token this API issued")
	}
	return page, nil
}

// startUsage serves g in process and returns a Client of it (fast retries).
func startUsage(t *testing.T, g *usageGateway) *Client {
	t.Helper()
	l := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	executionv1grpc.RegisterExecutionProviderServiceServer(srv, g)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return l.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	c := NewFromConn(conn, Config{MaxAttempts: 4, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	return c
}

func TestUsageRequests(t *testing.T) {
	start, end := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	ref := &executionv1.EnvironmentRef{Id: "env-1"}
	cases := []struct {
		name string
		call func(context.Context, *Client) (*Usage, error)
		want *executionv1.GetUsageRequest
	}{{
		name: "every kept hour of the current incarnation",
		call: func(ctx context.Context, c *Client) (*Usage, error) { return c.Usage(ctx, ref, UsageOptions{}) },
		want: &executionv1.GetUsageRequest{Environment: ref},
	}, {
		name: "a range by day",
		call: func(ctx context.Context, c *Client) (*Usage, error) {
			return c.Usage(ctx, testEnv.GetRef(), UsageOptions{Start: start, End: end, Granularity: UsageDay})
		},
		want: &executionv1.GetUsageRequest{Environment: testEnv.GetRef(), Start: timestamppb.New(start), End: timestamppb.New(end),
			Granularity: executionv1.UsageGranularity_USAGE_GRANULARITY_DAY},
	}, {
		name: "only a start, one window",
		call: func(ctx context.Context, c *Client) (*Usage, error) {
			return c.Usage(ctx, ref, UsageOptions{Start: start, Granularity: UsageTotal})
		},
		want: &executionv1.GetUsageRequest{Environment: ref, Start: timestamppb.New(start), Granularity: executionv1.UsageGranularity_USAGE_GRANULARITY_TOTAL},
	}, {
		name: "an environment handle's",
		call: func(ctx context.Context, c *Client) (*Usage, error) {
			env := c.Handle(AttachRequest{Owner: Owner{Issuer: "i", Subject: "s"}, BindingID: "conv-1", ID: "env-1", Revision: testEnv.GetRef().GetRevision()})
			return env.Usage(ctx, UsageOptions{Granularity: UsageHour})
		},
		want: &executionv1.GetUsageRequest{Environment: testEnv.GetRef(), Granularity: executionv1.UsageGranularity_USAGE_GRANULARITY_HOUR},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := &usageGateway{fail: map[string]bool{"GetUsage": true}}
			got, err := tc.call(t.Context(), startUsage(t, g))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(usageLedger, got, protocmp.Transform()); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
			// A read: the transport failure was retried, with the same request.
			if len(g.gets) != 2 {
				t.Fatalf("%d attempts, want 2", len(g.gets))
			}
			for _, r := range g.gets {
				if diff := cmp.Diff(tc.want, r, protocmp.Transform()); diff != "" {
					t.Errorf("request (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// record is a usage record of environment id in the hour starting at h o'clock.
func record(id string, h int) *executionv1.UsageRecord {
	s := time.Date(2026, 11, 30, h, 0, 0, 0, time.UTC)
	return &executionv1.UsageRecord{Environment: &executionv1.EnvironmentRef{Id: id, Revision: "r-" + id}, BindingId: "b-" + id,
		Window: &executionv1.UsageWindow{Start: timestamppb.New(s), End: timestamppb.New(s.Add(time.Hour)), Usage: &executionv1.UsageCounters{Commands: int64(h)}}}
}

func TestListUsagePages(t *testing.T) {
	g := &usageGateway{fail: map[string]bool{"ListUsage:p2": true}, pages: map[string]*executionv1.ListUsageResponse{
		"":   {Records: []*executionv1.UsageRecord{record("env-a", 10), record("env-a", 11)}, NextPageToken: "p2"},
		"p2": {Records: []*executionv1.UsageRecord{record("env-b", 10)}, NextPageToken: "p3"},
		"p3": {}, // a last page may be empty
	}}
	c := startUsage(t, g)
	start, end := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	o := ListUsageOptions{Owner: Owner{Issuer: "https://idp.example", Subject: "alice"}, BindingID: "conv-1", Start: start, End: end,
		Granularity: UsageHour, GroupBy: GroupByBinding, PageSize: 2}
	var got []*executionv1.UsageRecord
	for r, err := range c.ListUsage(t.Context(), o) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	want := []*executionv1.UsageRecord{record("env-a", 10), record("env-a", 11), record("env-b", 10)}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	var tokens []string
	for _, r := range g.lists {
		tokens = append(tokens, r.GetPageToken())
	}
	if diff := cmp.Diff([]string{"", "p2", "p2", "p3"}, tokens); diff != "" {
		t.Errorf("page tokens (-want +got):\n%s", diff)
	}
	first := &executionv1.ListUsageRequest{Owner: &executionv1.Owner{Issuer: "https://idp.example", Subject: "alice"}, BindingId: "conv-1",
		Start: timestamppb.New(start), End: timestamppb.New(end), Granularity: executionv1.UsageGranularity_USAGE_GRANULARITY_HOUR,
		GroupBy: executionv1.UsageGroupBy_USAGE_GROUP_BY_BINDING, PageSize: 2}
	for i, r := range g.lists {
		want := proto.CloneOf(first)
		want.PageToken = tokens[i]
		if diff := cmp.Diff(want, r, protocmp.Transform()); diff != "" {
			t.Errorf("request %d (-want +got):\n%s", i, diff)
		}
	}
}

func TestListUsageScopes(t *testing.T) {
	cases := []struct {
		name string
		o    ListUsageOptions
		want *executionv1.ListUsageRequest
	}{
		{"the client's own, every owner's", ListUsageOptions{}, &executionv1.ListUsageRequest{}},
		{"another client's", ListUsageOptions{Client: "spiffe://example.org/platform", GroupBy: GroupByOwner},
			&executionv1.ListUsageRequest{Client: "spiffe://example.org/platform", GroupBy: executionv1.UsageGroupBy_USAGE_GROUP_BY_OWNER}},
		{"every administered client's", ListUsageOptions{AllClients: true, GroupBy: GroupByClient, Granularity: UsageTotal},
			&executionv1.ListUsageRequest{AllClients: true, GroupBy: executionv1.UsageGroupBy_USAGE_GROUP_BY_CLIENT,
				Granularity: executionv1.UsageGranularity_USAGE_GRANULARITY_TOTAL}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := &usageGateway{pages: map[string]*executionv1.ListUsageResponse{"": {Records: []*executionv1.UsageRecord{record("env-a", 1)}}}}
			records, next, err := startUsage(t, g).ListUsagePage(t.Context(), tc.o, "")
			if err != nil || len(records) != 1 || next != "" {
				t.Fatalf("%d records, next %q, %v", len(records), next, err)
			}
			if diff := cmp.Diff(tc.want, g.lists[0], protocmp.Transform()); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
		})
	}
}

func TestListUsageStops(t *testing.T) {
	pages := map[string]*executionv1.ListUsageResponse{
		"":   {Records: []*executionv1.UsageRecord{record("env-a", 1), record("env-a", 2)}, NextPageToken: "p2"},
		"p2": {Records: []*executionv1.UsageRecord{record("env-b", 1)}},
	}
	t.Run("when the caller stops", func(t *testing.T) {
		g := &usageGateway{pages: pages}
		for range startUsage(t, g).ListUsage(t.Context(), ListUsageOptions{}) {
			break
		}
		if len(g.lists) != 1 {
			t.Fatalf("%d pages asked for, want 1: the next page is fetched only when reached", len(g.lists))
		}
	})
	t.Run("at a refusal, which ends the iteration", func(t *testing.T) {
		g := &usageGateway{pages: pages, refusals: []error{answer(codes.PermissionDenied, "PERMISSION_DENIED", false)}}
		var n int
		var last error
		for r, err := range startUsage(t, g).ListUsage(t.Context(), ListUsageOptions{AllClients: true}) {
			n++
			if err == nil || r != nil {
				t.Fatalf("yielded %v, %v; want only the refusal", r, err)
			}
			last = err
		}
		if n != 1 || !errors.Is(last, ErrPermissionDenied) || len(g.lists) != 1 {
			t.Fatalf("%d yields, last %v, %d attempts; want one ErrPermissionDenied after one attempt", n, last, len(g.lists))
		}
	})
}
