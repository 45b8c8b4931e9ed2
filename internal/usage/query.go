package usage

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/ident"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// Bounds of the usage reads.
const (
	// MaxPageSize bounds a ListUsage page: a record is ~150 bytes on the wire.
	MaxPageSize = 1000
	// defPageSize is a page when none is asked for.
	defPageSize = 500
	// maxClientIdentity bounds ListUsageRequest.client (a URI SAN, as the gateway's).
	maxClientIdentity = 2048
)

// CheckGet validates a GetUsageRequest's fields (the gateway runs it before forwarding).
func CheckGet(r *executionv1.GetUsageRequest) error {
	var f ident.Fields
	f.DNSLabel("environment.id", r.GetEnvironment().GetId())
	if rev := r.GetEnvironment().GetRevision(); rev != "" {
		f.UUID("environment.revision", rev)
	}
	checkRange(&f, r.GetStart(), r.GetEnd(), r.GetGranularity())
	return f.Err()
}

// CheckList validates a ListUsageRequest's fields.
func CheckList(r *executionv1.ListUsageRequest) error {
	var f ident.Fields
	if o := r.GetOwner(); o != nil {
		f.Owner("owner", o.GetIssuer(), o.GetSubject())
	}
	if r.GetBindingId() != "" {
		f.Identifier("binding_id", r.GetBindingId())
	}
	if c := r.GetClient(); c != "" {
		if !ident.IsPrintableASCII(c, maxClientIdentity) {
			f.Fail("client", fmt.Sprintf("must be a client identity of at most %d bytes", maxClientIdentity))
		}
		if r.GetAllClients() {
			f.Fail("all_clients", "excludes client")
		}
	}
	checkRange(&f, r.GetStart(), r.GetEnd(), r.GetGranularity())
	if _, ok := executionv1.UsageGroupBy_name[int32(r.GetGroupBy())]; !ok {
		f.Fail("group_by", "is not a grouping")
	}
	if r.GetPageSize() > MaxPageSize {
		f.Fail("page_size", fmt.Sprintf("must be at most %d", MaxPageSize))
	}
	if _, _, ok := decodeToken(r.GetPageToken()); !ok {
		f.Fail("page_token", "is not a token this API issued")
	}
	return f.Err()
}

func checkRange(f *ident.Fields, start, end *timestamppb.Timestamp, g executionv1.UsageGranularity) {
	if start != nil && start.CheckValid() != nil {
		f.Fail("start", "must be a valid timestamp")
	}
	if end != nil && end.CheckValid() != nil {
		f.Fail("end", "must be a valid timestamp")
	}
	if start != nil && end != nil && !end.AsTime().After(start.AsTime()) {
		f.Fail("end", "must be after start")
	}
	if _, ok := executionv1.UsageGranularity_name[int32(g)]; !ok {
		f.Fail("granularity", "is not a granularity")
	}
}

// Scope is whose ledgers a caller reads: clients (nil: every client), an owner ("" any),
// a binding ("" any).
type Scope struct {
	Clients   map[string]bool
	OwnerHash string
	BindingID string
}

func (s Scope) admits(u *executionv1alpha1.ExecutionUsage) bool {
	sp := u.Spec
	return (s.Clients == nil || s.Clients[sp.ClientHash]) && (s.OwnerHash == "" || s.OwnerHash == sp.OwnerHash) &&
		(s.BindingID == "" || s.BindingID == sp.BindingID)
}

// Range is a query's windows: [Start, End) cut to whole windows of Granularity.
type Range struct {
	Start, End  time.Time
	Granularity executionv1.UsageGranularity
}

// NewRange cuts a request's range: start down and end up to whole windows; an unset start
// is the oldest kept window (now − retention), an unset end is now.
func NewRange(start, end *timestamppb.Timestamp, g executionv1.UsageGranularity, now time.Time, retention time.Duration) Range {
	r := Range{Start: now.Add(-retention), End: now, Granularity: g}
	if start != nil {
		r.Start = start.AsTime()
	}
	if end != nil {
		r.End = end.AsTime()
	}
	r.Start = r.Start.UTC().Truncate(Window)
	if g == executionv1.UsageGranularity_USAGE_GRANULARITY_DAY {
		r.Start = day(r.Start)
	}
	if e := r.End.UTC().Truncate(Window); e.Before(r.End) {
		r.End = e.Add(Window)
	}
	if g == executionv1.UsageGranularity_USAGE_GRANULARITY_DAY {
		if e := day(r.End); e.Before(r.End) {
			r.End = e.Add(24 * time.Hour)
		}
	}
	return r
}

func day(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// windowOf is the start and end of the answer's window that holds the hour start.
func (r Range) windowOf(start time.Time) (time.Time, time.Time) {
	switch r.Granularity {
	case executionv1.UsageGranularity_USAGE_GRANULARITY_DAY:
		d := day(start)
		return d, d.Add(24 * time.Hour)
	case executionv1.UsageGranularity_USAGE_GRANULARITY_TOTAL:
		return r.Start, r.End
	}
	return start, start.Add(Window)
}

// Windows cuts a viewed ledger's hourly windows into the range's, oldest first; closed
// marks those that ended settle before now.
func (r Range) Windows(u *executionv1alpha1.ExecutionUsage, now time.Time, settle time.Duration) []*executionv1.UsageWindow {
	var out []*executionv1.UsageWindow
	for _, w := range u.Status.Windows {
		if w.Start.Time.Before(r.Start) || !w.Start.Time.Before(r.End) {
			continue
		}
		start, end := r.windowOf(w.Start.Time)
		if n := len(out); n > 0 && out[n-1].GetStart().AsTime().Equal(start) {
			addProto(out[n-1].Usage, w.UsageCounters)
			continue
		}
		uw := &executionv1.UsageWindow{Start: timestamppb.New(start), End: timestamppb.New(end), Usage: &executionv1.UsageCounters{},
			Closed: !end.Add(settle).After(now)}
		addProto(uw.Usage, w.UsageCounters)
		out = append(out, uw)
	}
	return out
}

// Counters is the wire form of c.
func Counters(c executionv1alpha1.UsageCounters) *executionv1.UsageCounters {
	out := &executionv1.UsageCounters{}
	addProto(out, c)
	return out
}

func addProto(into *executionv1.UsageCounters, c executionv1alpha1.UsageCounters) {
	into.CpuNanoseconds += c.CPUNanoseconds
	into.MemoryKibSeconds += c.MemoryKiBSeconds
	into.MemoryPeakBytes = max(into.MemoryPeakBytes, c.MemoryPeakBytes)
	into.StorageKibSeconds += c.StorageKiBSeconds
	into.ReadyMilliseconds += c.ReadyMilliseconds
	into.SuspendedMilliseconds += c.SuspendedMilliseconds
	into.Commands += c.Commands
	into.BytesIn += c.BytesIn
	into.BytesOut += c.BytesOut
}

func addWire(into, c *executionv1.UsageCounters) {
	into.CpuNanoseconds += c.GetCpuNanoseconds()
	into.MemoryKibSeconds += c.GetMemoryKibSeconds()
	into.MemoryPeakBytes = max(into.MemoryPeakBytes, c.GetMemoryPeakBytes())
	into.StorageKibSeconds += c.GetStorageKibSeconds()
	into.ReadyMilliseconds += c.GetReadyMilliseconds()
	into.SuspendedMilliseconds += c.GetSuspendedMilliseconds()
	into.Commands += c.GetCommands()
	into.BytesIn += c.GetBytesIn()
	into.BytesOut += c.GetBytesOut()
}

// List sums the viewed ledgers in scope over the range's windows, grouped, one page after
// the token's position.
func List(ledgers []*executionv1alpha1.ExecutionUsage, s Scope, r Range, by executionv1.UsageGroupBy,
	pageSize int, token string, now time.Time, settle time.Duration) ([]*executionv1.UsageRecord, string) {
	type group struct {
		key    string
		record *executionv1.UsageRecord
		byTime map[int64]*executionv1.UsageWindow
	}
	groups := map[string]*group{}
	for _, u := range ledgers {
		if !s.admits(u) {
			continue
		}
		key, proto := groupKey(u, by)
		g := groups[key]
		if g == nil {
			g = &group{key: key, record: proto, byTime: map[int64]*executionv1.UsageWindow{}}
			groups[key] = g
		}
		for _, w := range r.Windows(u, now, settle) {
			t := w.GetStart().AsTime().Unix()
			if cur := g.byTime[t]; cur != nil {
				addWire(cur.Usage, w.Usage)
				cur.Closed = cur.Closed && w.Closed
			} else {
				g.byTime[t] = w
			}
		}
	}
	afterKey, afterTime, _ := decodeToken(token)
	var out []*executionv1.UsageRecord
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if pageSize <= 0 {
		pageSize = defPageSize
	}
	for _, k := range keys {
		if k < afterKey {
			continue
		}
		g := groups[k]
		times := make([]int64, 0, len(g.byTime))
		for t := range g.byTime {
			times = append(times, t)
		}
		slices.Sort(times)
		for _, t := range times {
			if k == afterKey && token != "" && t <= afterTime {
				continue
			}
			if len(out) == pageSize {
				last := out[len(out)-1]
				return out, encodeToken(recordKey(last), last.GetWindow().GetStart().AsTime().Unix())
			}
			rec := cloneRecord(g.record)
			rec.Window = g.byTime[t]
			out = append(out, rec)
		}
	}
	return out, ""
}

// recordKey is the group key of rec: its key fields joined, so that keys sort like them.
func recordKey(rec *executionv1.UsageRecord) string {
	return rec.GetEnvironment().GetId() + "\x00" + rec.GetEnvironment().GetRevision() + "\x00" + rec.GetClientHash() + "\x00" +
		rec.GetOwnerHash() + "\x00" + rec.GetBindingId() + "\x00" + rec.GetSnapshot()
}

// groupKey is a ledger's group under by, and the record fields it carries. The key sorts
// like the fields, so that pages follow each other.
func groupKey(u *executionv1alpha1.ExecutionUsage, by executionv1.UsageGroupBy) (string, *executionv1.UsageRecord) {
	sp := u.Spec
	rec := &executionv1.UsageRecord{}
	switch by {
	case executionv1.UsageGroupBy_USAGE_GROUP_BY_BINDING:
		rec.ClientHash, rec.OwnerHash, rec.BindingId = sp.ClientHash, sp.OwnerHash, sp.BindingID
	case executionv1.UsageGroupBy_USAGE_GROUP_BY_OWNER:
		rec.OwnerHash = sp.OwnerHash
	case executionv1.UsageGroupBy_USAGE_GROUP_BY_CLIENT:
		rec.ClientHash = sp.ClientHash
	case executionv1.UsageGroupBy_USAGE_GROUP_BY_NONE:
	default:
		rec.Environment = &executionv1.EnvironmentRef{Id: sp.Environment.Name, Revision: string(sp.Environment.UID)}
		rec.ClientHash, rec.OwnerHash, rec.BindingId, rec.Profile = sp.ClientHash, sp.OwnerHash, sp.BindingID, sp.Profile
		if sp.Snapshot != nil {
			rec.Snapshot = sp.Snapshot.Name
		}
	}
	return recordKey(rec), rec
}

func cloneRecord(r *executionv1.UsageRecord) *executionv1.UsageRecord {
	out := &executionv1.UsageRecord{BindingId: r.BindingId, OwnerHash: r.OwnerHash, ClientHash: r.ClientHash, Profile: r.Profile, Snapshot: r.Snapshot}
	if r.Environment != nil {
		out.Environment = &executionv1.EnvironmentRef{Id: r.Environment.Id, Revision: r.Environment.Revision}
	}
	return out
}

// encodeToken and decodeToken carry a page's position: the last record's group key and
// window start.
func encodeToken(key string, start int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(key + "\x01" + strconv.FormatInt(start, 10)))
}

func decodeToken(token string) (string, int64, bool) {
	if token == "" {
		return "", 0, true
	}
	if len(token) > ident.MaxPageToken {
		return "", 0, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return "", 0, false
	}
	key, t, ok := strings.Cut(string(raw), "\x01")
	if !ok {
		return "", 0, false
	}
	n, err := strconv.ParseInt(t, 10, 64)
	return key, n, err == nil
}

// Newest picks, of the ledgers of an environment name, the one of revision (any when
// empty: the current incarnation's, else the last ended).
func Newest(ledgers []*executionv1alpha1.ExecutionUsage, name, revision string) *executionv1alpha1.ExecutionUsage {
	var best *executionv1alpha1.ExecutionUsage
	for _, u := range ledgers {
		if u.Spec.Snapshot != nil || u.Spec.Environment.Name != name || (revision != "" && string(u.Spec.Environment.UID) != revision) {
			continue
		}
		if best == nil || better(u, best) {
			best = u
		}
	}
	return best
}

// better prefers a ledger still open, then the one created last.
func better(a, b *executionv1alpha1.ExecutionUsage) bool {
	if (a.Status.EndedAt == nil) != (b.Status.EndedAt == nil) {
		return a.Status.EndedAt == nil
	}
	return cmp.Compare(a.CreationTimestamp.UnixNano(), b.CreationTimestamp.UnixNano()) > 0
}
