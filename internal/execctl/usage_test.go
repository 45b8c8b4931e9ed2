package execctl

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/pkg/client"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// hour is the scripted usage window starting at h o'clock on the day of at.
func hour(h int, closed bool, c *executionv1.UsageCounters) *executionv1.UsageWindow {
	s := time.Date(2026, 11, 30, h, 0, 0, 0, time.UTC)
	return &executionv1.UsageWindow{Start: timestamppb.New(s), End: timestamppb.New(s.Add(time.Hour)), Usage: c, Closed: closed}
}

var (
	// usageTotals exercise every unit: 12.346 core-seconds, 0.5 GiB-hours of memory (256 MiB
	// for two hours), a 300 MiB peak, 2 GiB-hours of storage, 2h ready, 1m30.5s suspended,
	// 97.7 KiB in, 12 B out.
	usageTotals = &executionv1.UsageCounters{CpuNanoseconds: 12_345_678_901, MemoryKibSeconds: 256 * 1024 * 7200, MemoryPeakBytes: 300 << 20,
		StorageKibSeconds: 1024 * 1024 * 7200, ReadyMilliseconds: 7_200_000, SuspendedMilliseconds: 90_500, Commands: 3, BytesIn: 100_000, BytesOut: 12}
	usageLedger = &executionv1.GetUsageResponse{Environment: fixedEnv.GetRef(), BindingId: "conv-1", Profile: "sandbox", Totals: usageTotals,
		AsOf: at, OwnerHash: strings.Repeat("0a", 32), ClientHash: strings.Repeat("c1", 32),
		Windows: []*executionv1.UsageWindow{
			hour(10, true, &executionv1.UsageCounters{CpuNanoseconds: 2_000_000_000, Commands: 2, BytesIn: 2048, ReadyMilliseconds: 3_600_000}),
			hour(11, false, &executionv1.UsageCounters{CpuNanoseconds: 500_000, Commands: 1, BytesOut: 5 << 20, ReadyMilliseconds: 1_800_250}),
		}}
)

func (scripted) GetUsage(_ context.Context, r *executionv1.GetUsageRequest) (*executionv1.GetUsageResponse, error) {
	ref := r.GetEnvironment()
	if ref.GetId() != fixedEnv.GetRef().GetId() || ref.GetRevision() != "" && ref.GetRevision() != fixedEnv.GetRef().GetRevision() {
		return nil, refusal(codes.NotFound, "NOT_FOUND") // absent, or another incarnation
	}
	if r.GetGranularity() == executionv1.UsageGranularity_USAGE_GRANULARITY_TOTAL {
		// One window: the range asked (the scripted ledger's own when unset).
		w := &executionv1.UsageWindow{Start: r.GetStart(), End: r.GetEnd(), Usage: usageLedger.GetTotals(), Closed: true}
		if w.Start == nil {
			w.Start = usageLedger.GetWindows()[0].GetStart()
		}
		if w.End == nil {
			w.End = at
		}
		u := proto.CloneOf(usageLedger)
		u.Windows = []*executionv1.UsageWindow{w}
		return u, nil
	}
	return usageLedger, nil
}

// usageRecord is the scripted record of environment id's window, with the key fields of
// the grouping by only.
func usageRecord(by executionv1.UsageGroupBy, id string, w *executionv1.UsageWindow) *executionv1.UsageRecord {
	r := &executionv1.UsageRecord{Window: w}
	switch by {
	case executionv1.UsageGroupBy_USAGE_GROUP_BY_ENVIRONMENT, executionv1.UsageGroupBy_USAGE_GROUP_BY_UNSPECIFIED:
		r.Environment = &executionv1.EnvironmentRef{Id: id, Revision: "5f0e1a1e-0000-4000-8000-00000000000" + id[len(id)-1:]}
		r.BindingId, r.Profile, r.OwnerHash, r.ClientHash = "conv-"+id[len(id)-1:], "sandbox", usageLedger.GetOwnerHash(), usageLedger.GetClientHash()
	case executionv1.UsageGroupBy_USAGE_GROUP_BY_BINDING:
		r.BindingId = "conv-" + id[len(id)-1:]
	case executionv1.UsageGroupBy_USAGE_GROUP_BY_OWNER:
		r.OwnerHash = usageLedger.GetOwnerHash()
	case executionv1.UsageGroupBy_USAGE_GROUP_BY_CLIENT:
		r.ClientHash = usageLedger.GetClientHash()
	}
	return r
}

// ListUsage answers two pages: environment 1's two windows (the second still open), then
// environment 2's closed one. A client named "spiffe://denied" is refused.
func (scripted) ListUsage(_ context.Context, r *executionv1.ListUsageRequest) (*executionv1.ListUsageResponse, error) {
	if r.GetClient() == "spiffe://denied" {
		return nil, refusal(codes.PermissionDenied, "PERMISSION_DENIED")
	}
	by := r.GetGroupBy()
	switch r.GetPageToken() {
	case "":
		return &executionv1.ListUsageResponse{AsOf: at, NextPageToken: "p2", Records: []*executionv1.UsageRecord{
			usageRecord(by, "xenv-1", usageLedger.GetWindows()[0]), usageRecord(by, "xenv-1", usageLedger.GetWindows()[1])}}, nil
	case "p2":
		return &executionv1.ListUsageResponse{AsOf: at, Records: []*executionv1.UsageRecord{
			usageRecord(by, "xenv-2", hour(10, true, &executionv1.UsageCounters{Commands: 1, CpuNanoseconds: 1_000, StorageKibSeconds: 3600}))}}, nil
	}
	return nil, refusal(codes.InvalidArgument, "INVALID_ARGUMENT")
}

func TestUsageGolden(t *testing.T) {
	h := newHarness(t)
	const env = "xenv-0123456789abcdef0123"
	steps := []struct {
		args []string
		code int
	}{
		{[]string{"usage", "get", env}, 0},
		{[]string{"usage", "get", env, "--revision", "5f0e1a1e-0000-4000-8000-000000000001", "--since", "2026-11-30T00:00:00Z", "-o", "json"}, 0},
		{[]string{"usage", "get", env, "--since", "2026-11-30T00:00:00Z", "--until", "2026-11-30T06:00:00+02:00", "--granularity", "total"}, 0},
		{[]string{"usage", "get", "xenv-absent"}, ExitNotFound},
		{[]string{"usage", "get", env, "--revision", "5f0e1a1e-0000-4000-8000-000000000009"}, ExitNotFound},
		{[]string{"usage", "get", env, "--granularity", "week", "--since", "yesterday"}, cli.ExitUsage},
		{[]string{"usage", "get", env, "--since", "2026-11-30T00:00:00Z", "--until", "2026-11-29T00:00:00Z"}, cli.ExitUsage},
		{[]string{"usage", "get"}, cli.ExitUsage},
		{[]string{"usage", "list"}, 0},
		{[]string{"usage", "list", "--group-by", "owner", "--since", "24h"}, 0},
		{[]string{"usage", "list", "--group-by", "binding"}, 0},
		{[]string{"usage", "list", "--group-by", "none", "--granularity", "day"}, 0},
		{[]string{"usage", "list", "--group-by", "client", "-o", "json"}, 0},
		{[]string{"usage", "list", "--client", "spiffe://x", "--all-clients", "--group-by", "tenant"}, cli.ExitUsage},
		{[]string{"usage", "list", "--client", "spiffe://denied"}, ExitDenied},
		{[]string{"usage", "export", "--format", "csv"}, 0},
		{[]string{"usage", "export", "--closed-only=false"}, 0},
		{[]string{"usage", "export", "--format", "xml"}, cli.ExitUsage},
		{[]string{"usage", "export", "--client", "spiffe://denied", "--format", "csv"}, ExitDenied},
	}
	var all strings.Builder
	for _, s := range steps {
		stdout, stderr, code := h.execctl(t, s.args...)
		if code != s.code {
			t.Errorf("%v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", s.args, code, s.code, stdout, stderr)
		}
		all.WriteString("$ execctl " + strings.Join(s.args, " ") + "\n" + stdout)
		if stderr != "" {
			all.WriteString("[stderr]\n" + stderr)
		}
		all.WriteString("[exit " + itoa(code) + "]\n\n")
	}
	for _, args := range [][]string{{"usage", "help"}, {"usage", "get", "-h"}, {"usage", "list", "-h"}, {"usage", "export", "-h"}} {
		stdout, stderr, code := (&harness{env: map[string]string{}, state: "/nonexistent"}).execctl(t, args...) // no EXECPLANE_* defaults in the text
		all.WriteString("$ execctl " + strings.Join(args, " ") + "\n" + stdout + stderr + "[exit " + itoa(code) + "]\n\n")
	}
	checkGolden(t, "usage.golden", all.String())
}

// The export's lines are a contract with billing systems: the fields, their order and
// names, only closed windows by default, and each format readable by its standard parser.
func TestUsageExportLines(t *testing.T) {
	h := newHarness(t)
	wantFields := []string{"window_start", "window_end", "closed", "environment", "revision", "binding", "owner_hash", "client_hash", "profile",
		"cpu_nanoseconds", "memory_kib_seconds", "memory_peak_bytes", "storage_kib_seconds", "ready_milliseconds", "suspended_milliseconds",
		"commands", "bytes_in", "bytes_out"}
	cases := []struct {
		name   string
		args   []string
		format string
		// want is each line's (environment, window_start, closed, commands).
		want [][4]string
	}{
		{"closed windows, CSV", []string{"--format", "csv"}, formatCSV,
			[][4]string{{"xenv-1", "2026-11-30T10:00:00Z", "true", "2"}, {"xenv-2", "2026-11-30T10:00:00Z", "true", "1"}}},
		{"every window, JSON lines", []string{"--closed-only=false"}, formatJSONL,
			[][4]string{{"xenv-1", "2026-11-30T10:00:00Z", "true", "2"}, {"xenv-1", "2026-11-30T11:00:00Z", "false", "1"}, {"xenv-2", "2026-11-30T10:00:00Z", "true", "1"}}},
		{"by owner: the key fields of the grouping only", []string{"--format", "csv", "--group-by", "owner"}, formatCSV,
			[][4]string{{"", "2026-11-30T10:00:00Z", "true", "2"}, {"", "2026-11-30T10:00:00Z", "true", "1"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := h.execctl(t, append([]string{"usage", "export"}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var lines []map[string]string
			switch tc.format {
			case formatCSV:
				rows, err := csv.NewReader(strings.NewReader(stdout)).ReadAll()
				if err != nil || len(rows) == 0 {
					t.Fatalf("csv: %v %q", err, stdout)
				}
				if diff := cmp.Diff(wantFields, rows[0]); diff != "" {
					t.Errorf("header (-want +got):\n%s", diff)
				}
				for _, row := range rows[1:] {
					line := map[string]string{}
					for i, v := range row {
						line[rows[0][i]] = v
					}
					lines = append(lines, line)
				}
			case formatJSONL:
				if !strings.HasSuffix(stdout, "\n") {
					t.Fatalf("the last line is not ended: %q", stdout)
				}
				for _, text := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
					line, keys, err := decodeLine(text)
					if err != nil {
						t.Fatalf("jsonl: %v", err)
					}
					if diff := cmp.Diff(wantFields, keys); diff != "" {
						t.Errorf("fields (-want +got):\n%s", diff)
					}
					lines = append(lines, line)
				}
			}
			var got [][4]string
			for _, l := range lines {
				got = append(got, [4]string{l["environment"], l["window_start"], l["closed"], l["commands"]})
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("lines (-want +got):\n%s", diff)
			}
		})
	}
}

// decodeLine reads one JSON line, an object of scalars: its values as text (numbers and
// booleans as written), and its keys in order.
func decodeLine(line string) (map[string]string, []string, error) {
	dec := json.NewDecoder(strings.NewReader(line))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil, fmt.Errorf("not an object: %q", line)
	}
	values, keys := map[string]string{}, []string{}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		v, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		key := k.(string)
		switch v := v.(type) {
		case string:
			values[key] = v
		case json.Number:
			values[key] = v.String()
		case bool:
			values[key] = strconv.FormatBool(v)
		default:
			return nil, nil, fmt.Errorf("%s: not a scalar: %v", key, v)
		}
		keys = append(keys, key)
	}
	if _, err := dec.Token(); err != nil || dec.More() {
		return nil, nil, fmt.Errorf("more than one object on a line: %q", line)
	}
	return values, keys, nil
}

func TestParseWhen(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 34, 56, 0, time.UTC)
	cases := []struct {
		in   string
		want time.Time
		bad  bool
	}{
		{in: ""},
		{in: "2026-11-01T00:00:00Z", want: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)},
		{in: "2026-11-01T02:00:00+02:00", want: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)},
		{in: "24h", want: now.Add(-24 * time.Hour)},
		{in: "90m", want: now.Add(-90 * time.Minute)},
		{in: "7d", want: now.Add(-7 * 24 * time.Hour)},
		{in: "-1h", bad: true},
		{in: "0s", bad: true},
		{in: "yesterday", bad: true},
		{in: "2026-11-01", bad: true},
		{in: "1.5d", bad: true},
	}
	for _, tc := range cases {
		got, err := parseWhen(tc.in, now)
		if (err != nil) != tc.bad || !got.Equal(tc.want) {
			t.Errorf("parseWhen(%q) = %v, %v; want %v (error: %v)", tc.in, got, err, tc.want, tc.bad)
		}
	}
}

func TestUsageListFlags(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 34, 56, 0, time.UTC)
	env := map[string]string{"EXECPLANE_ISSUER": "https://idp.example", "EXECPLANE_OWNER": "alice"}
	cases := []struct {
		name string
		args []string
		want client.ListUsageOptions
		// problems are the flags a refusal names.
		problems []string
	}{
		{name: "the defaults: every owner's, hourly, by environment", want: client.ListUsageOptions{Granularity: client.UsageHour, GroupBy: client.GroupByEnvironment}},
		{name: "an owner, a binding and a range", args: []string{"--owner", "bob", "--binding", "conv-1", "--since", "7d", "--until", "2026-11-30T00:00:00Z", "--granularity", "day", "--group-by", "binding"},
			want: client.ListUsageOptions{Owner: client.Owner{Issuer: "https://idp.example", Subject: "bob"}, BindingID: "conv-1",
				Start: now.Add(-7 * 24 * time.Hour), End: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), Granularity: client.UsageDay, GroupBy: client.GroupByBinding}},
		{name: "another client's, in total", args: []string{"--client", "spiffe://example.org/platform", "--granularity", "total", "--group-by", "none"},
			want: client.ListUsageOptions{Client: "spiffe://example.org/platform", Granularity: client.UsageTotal, GroupBy: client.GroupByNone}},
		{name: "every client's, by client", args: []string{"--all-clients", "--group-by", "client"},
			want: client.ListUsageOptions{AllClients: true, Granularity: client.UsageHour, GroupBy: client.GroupByClient}},
		{name: "an owner without an issuer", args: []string{"--owner", "bob", "--issuer", ""}, problems: []string{"--issuer"}},
		{name: "every problem at once", args: []string{"--client", "c", "--all-clients", "--since", "soon", "--until", "-1h", "--granularity", "week", "--group-by", "tenant"},
			problems: []string{"--all-clients", "--since", "--until", "--granularity", "--group-by"}},
		{name: "an empty range", args: []string{"--since", "1h", "--until", "2h"}, problems: []string{"--until"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("usage list", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			read := listFlags(fs, func(k string) string { return env[k] })
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			got, err := read(now)
			if len(tc.problems) > 0 {
				if err == nil || cli.ExitCode(err) != cli.ExitUsage {
					t.Fatalf("got %+v, %v; want a usage error", got, err)
				}
				for _, p := range tc.problems {
					if !strings.Contains(err.Error(), p+":") {
						t.Errorf("%q not named in %v", p, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestUsageUnits(t *testing.T) {
	cases := []struct {
		name string
		c    *executionv1.UsageCounters
		want []string
	}{
		{"nothing", nil, []string{"0.000", "0.000", "0.0", "0.000", "0s", "0s", "0", "0 B", "0 B"}},
		{"every unit", usageTotals, []string{"12.346", "0.500", "300.0", "2.000", "2h0m0s", "1m31s", "3", "97.7 KiB", "12 B"}},
		{"under a second, and large", &executionv1.UsageCounters{CpuNanoseconds: 1_000_000, ReadyMilliseconds: 250, BytesIn: 1023, BytesOut: 3 << 40},
			[]string{"0.001", "0.000", "0.0", "0.000", "250ms", "0s", "0", "1023 B", "3.0 TiB"}},
	}
	for _, tc := range cases {
		if diff := cmp.Diff(tc.want, counterCells(tc.c)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}
