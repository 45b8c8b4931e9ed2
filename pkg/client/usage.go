package client

import (
	"context"
	"iter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// Usage is one environment's usage ledger as GetUsage answers it: the environment, its
// binding and profile, the hashes of its owner and creating client, its totals since
// creation as of AsOf, and the windows of the range asked that have usage, oldest first.
// The field comments of proto/execution/v1 are its semantics (docs/usage.md).
type Usage = executionv1.GetUsageResponse

// UsageRecord is one group's usage in one window, as ListUsage answers it. Its key fields
// are those of the grouping (grouped by environment, every one is set).
type UsageRecord = executionv1.UsageRecord

// UsageWindow is the usage of [start, end); Closed says nothing more will be added to it,
// the windows a billing system takes.
type UsageWindow = executionv1.UsageWindow

// UsageCounters are the amounts used over a period: CPU nanoseconds, memory and storage
// KiB-seconds, the peak working set, ready and suspended milliseconds, commands, bytes in
// and out.
type UsageCounters = executionv1.UsageCounters

// UsageGranularity is the width of the windows a usage answer is cut into.
type UsageGranularity = executionv1.UsageGranularity

// The granularities; the zero value is the server's default, hourly windows.
const (
	// UsageHour cuts the range into hours.
	UsageHour = executionv1.UsageGranularity_USAGE_GRANULARITY_HOUR
	// UsageDay cuts the range into UTC days.
	UsageDay = executionv1.UsageGranularity_USAGE_GRANULARITY_DAY
	// UsageTotal answers one window: the whole range asked.
	UsageTotal = executionv1.UsageGranularity_USAGE_GRANULARITY_TOTAL
)

// UsageGroupBy is the key ListUsage sums by.
type UsageGroupBy = executionv1.UsageGroupBy

// The groupings; the zero value is the server's default, by environment.
const (
	GroupByEnvironment = executionv1.UsageGroupBy_USAGE_GROUP_BY_ENVIRONMENT
	GroupByBinding     = executionv1.UsageGroupBy_USAGE_GROUP_BY_BINDING
	GroupByOwner       = executionv1.UsageGroupBy_USAGE_GROUP_BY_OWNER
	GroupByClient      = executionv1.UsageGroupBy_USAGE_GROUP_BY_CLIENT
	// GroupByNone sums everything in scope into one record per window.
	GroupByNone = executionv1.UsageGroupBy_USAGE_GROUP_BY_NONE
)

// UsageOptions select the windows of Usage; the zero value asks for every kept hour.
type UsageOptions struct {
	// Start and End are the range, [Start, End), cut by the server to whole windows. A zero
	// Start is the oldest kept window, a zero End is now.
	Start, End time.Time
	// Granularity is the windows' width (0: hourly).
	Granularity UsageGranularity
}

// Usage answers an environment's usage ledger (GetUsage): its totals since creation and
// its windows in the range of o. env's revision may be empty (the current incarnation's);
// a deleted environment's ledger is kept for the retention period and named by its
// revision. For the client that created the environment, or an administrator of that
// client; any other answers ErrNotFound.
func (c *Client) Usage(ctx context.Context, env *executionv1.EnvironmentRef, o UsageOptions) (*Usage, error) {
	req := &executionv1.GetUsageRequest{Environment: env, Start: timestamp(o.Start), End: timestamp(o.End), Granularity: o.Granularity}
	return call(ctx, c, idempotent, func(ctx context.Context, opts ...grpc.CallOption) (*executionv1.GetUsageResponse, error) {
		return c.api.GetUsage(ctx, req, opts...)
	})
}

// Usage answers this environment's usage ledger (Client.Usage of its reference).
func (e *Environment) Usage(ctx context.Context, o UsageOptions) (*Usage, error) {
	return e.c.Usage(ctx, e.Ref(), o)
}

// ListUsageOptions select and group the usage ListUsage sums; the zero value sums every
// kept hour of the client's environments, one record per environment and hour.
type ListUsageOptions struct {
	// Owner, when set, keeps only the environments this client created for that owner (the
	// client must be allowed to attest owners).
	Owner Owner
	// BindingID, when set, keeps only that binding's environments.
	BindingID string
	// Client (a client identity, a URI SAN) reads another client's environments instead;
	// AllClients every client the caller administers. Administrators only; not both.
	Client     string
	AllClients bool
	// Start and End are the range, [Start, End), cut by the server to whole windows. A zero
	// Start is the oldest kept window, a zero End is now.
	Start, End time.Time
	// Granularity is the windows' width (0: hourly); GroupBy the records' key (0: by
	// environment).
	Granularity UsageGranularity
	GroupBy     UsageGroupBy
	// PageSize is the server's page, 1..1000 records (0: its default of 500).
	PageSize uint32
}

// ListUsage iterates over the usage records of o, ordered by key, then window start, page
// by page (ListUsage).
func (c *Client) ListUsage(ctx context.Context, o ListUsageOptions) iter.Seq2[*UsageRecord, error] {
	return func(yield func(*UsageRecord, error) bool) {
		token := ""
		for {
			records, next, err := c.ListUsagePage(ctx, o, token)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, r := range records {
				if !yield(r, nil) {
					return
				}
			}
			if token = next; token == "" {
				return
			}
		}
	}
}

// ListUsagePage answers one page of ListUsage from a page token ("" for the first), and
// the next page's token ("" after the last): for callers that hand pages on, or bound each
// page's call on its own.
func (c *Client) ListUsagePage(ctx context.Context, o ListUsageOptions, token string) ([]*UsageRecord, string, error) {
	req := &executionv1.ListUsageRequest{BindingId: o.BindingID, Client: o.Client, AllClients: o.AllClients,
		Start: timestamp(o.Start), End: timestamp(o.End), Granularity: o.Granularity, GroupBy: o.GroupBy,
		PageSize: o.PageSize, PageToken: token}
	if o.Owner != (Owner{}) {
		req.Owner = o.Owner.proto()
	}
	resp, err := call(ctx, c, idempotent, func(ctx context.Context, opts ...grpc.CallOption) (*executionv1.ListUsageResponse, error) {
		return c.api.ListUsage(ctx, req, opts...)
	})
	if err != nil {
		return nil, "", err
	}
	return resp.GetRecords(), resp.GetNextPageToken(), nil
}

// timestamp is t on the wire, or nil (unset) for the zero time.
func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
