package execctl

import (
	"flag"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/pkg/client"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// granularities and groupings are the flag words of the API's enums.
var (
	granularities = map[string]client.UsageGranularity{"hour": client.UsageHour, "day": client.UsageDay, "total": client.UsageTotal}
	groupings     = map[string]client.UsageGroupBy{"environment": client.GroupByEnvironment, "binding": client.GroupByBinding,
		"owner": client.GroupByOwner, "client": client.GroupByClient, "none": client.GroupByNone}
)

// Export formats.
const (
	formatJSONL = "jsonl"
	formatCSV   = "csv"
)

// daysAgo is the one duration unit --since and --until accept beyond Go's (h, m, s): usage
// is looked at by the day.
var daysAgo = regexp.MustCompile(`^([0-9]{1,4})d$`)

// parseWhen reads an instant: RFC 3339, or a duration back from now ("24h", "90m", "7d").
// Empty is the zero time (unset).
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	var d time.Duration
	if m := daysAgo.FindStringSubmatch(s); m != nil {
		n, _ := strconv.Atoi(m[1])
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil || d <= 0 {
			return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a positive duration back from now (24h, 90m, 7d)", s)
		}
	}
	return now.Add(-d), nil
}

// rangeFlags registers --since, --until and --granularity; the returned function reads
// them (every problem at once into p).
func rangeFlags(fs *flag.FlagSet, granularity string) func(p *cli.Problems, now time.Time) (start, end time.Time, g client.UsageGranularity) {
	since := fs.String("since", "", "the range's start: RFC 3339, or a duration back from now (24h, 7d); cut to whole windows (default: the oldest kept)")
	until := fs.String("until", "", "the range's end, exclusive: RFC 3339, or a duration back from now (default: now)")
	width := fs.String("granularity", granularity, "the windows: hour, day (UTC) or total (one window: the whole range)")
	return func(p *cli.Problems, now time.Time) (time.Time, time.Time, client.UsageGranularity) {
		start, err := parseWhen(*since, now)
		if err != nil {
			p.Addf("since", "%v", err)
		}
		end, err := parseWhen(*until, now)
		if err != nil {
			p.Addf("until", "%v", err)
		}
		if !start.IsZero() && !end.IsZero() && !end.After(start) {
			p.Addf("until", "%s is not after --since %s", end.UTC().Format(time.RFC3339), start.UTC().Format(time.RFC3339))
		}
		g, ok := granularities[*width]
		if !ok {
			p.Addf("granularity", "%q is not one of hour, day, total", *width)
		}
		return start, end, g
	}
}

// listFlags registers ListUsage's filters (the owner, binding, client scope, range and
// grouping); the returned function reads them against now.
func listFlags(fs *flag.FlagSet, getenv func(string) string) func(now time.Time) (client.ListUsageOptions, error) {
	issuer := fs.String("issuer", getenv("EXECPLANE_ISSUER"), "with --owner: the owner's identity provider ($EXECPLANE_ISSUER)")
	subject := fs.String("owner", "", "only the environments created for this owner (default: every owner's)")
	binding := fs.String("binding", "", "only this binding's environments")
	clientID := fs.String("client", "", "administrators: another client's environments (its identity, a URI)")
	all := fs.Bool("all-clients", false, "administrators: every client's environments they administer")
	window := rangeFlags(fs, "hour")
	groupBy := fs.String("group-by", "environment", "one record per environment, binding, owner, client, or none (everything summed) per window")
	return func(now time.Time) (client.ListUsageOptions, error) {
		var p cli.Problems
		o := client.ListUsageOptions{BindingID: *binding, Client: *clientID, AllClients: *all}
		o.Start, o.End, o.Granularity = window(&p, now)
		if *subject != "" {
			p.Required("issuer", *issuer)
			o.Owner = client.Owner{Issuer: *issuer, Subject: *subject}
		}
		if *clientID != "" && *all {
			p.Addf("all-clients", "excludes --client")
		}
		var ok bool
		if o.GroupBy, ok = groupings[*groupBy]; !ok {
			p.Addf("group-by", "%q is not one of environment, binding, owner, client, none", *groupBy)
		}
		return o, p.Err()
	}
}

// eachUsageRecord pages through ListUsage, each page's call bounded by --timeout on its
// own (an export of many pages outlasts one call's deadline).
func (in *invocation) eachUsageRecord(o client.ListUsageOptions, f func(*client.UsageRecord) error) error {
	c, err := in.dial()
	if err != nil {
		return err
	}
	for token := ""; ; {
		ctx, cancel := in.callContext()
		records, next, err := c.ListUsagePage(ctx, o, token)
		cancel()
		if err != nil {
			return err
		}
		for _, r := range records {
			if err := f(r); err != nil {
				return err
			}
		}
		if token = next; token == "" {
			return nil
		}
	}
}

var usageGroup = &group{name: "usage", summary: "what environments used, by window: CPU, memory, storage, ready and suspended time, commands, bytes", leaves: []*leaf{
	{
		name: "get", args: "ENV", nargs: 1, summary: "an environment's totals since creation and its windows (hourly by default)",
		example: "execctl usage get xenv-59d14f8a21d8ced1aa54\n" +
			"execctl usage get xenv-59d14f8a21d8ced1aa54 --since 7d --granularity day\n" +
			"execctl usage get xenv-59d14f8a21d8ced1aa54 --revision 5f0e… --since 2026-11-01T00:00:00Z --until 2026-12-01T00:00:00Z --granularity total -o json   # a deleted one's, by revision",
		setup: func(fs *flag.FlagSet, in *invocation) func() error {
			revision := fs.String("revision", "", "the incarnation (its UID; default: the current one). A deleted environment's ledger is kept for the retention period and named by its revision")
			window := rangeFlags(fs, "hour")
			return func() error {
				var p cli.Problems
				o := client.UsageOptions{}
				o.Start, o.End, o.Granularity = window(&p, time.Now())
				if err := p.Err(); err != nil {
					return err
				}
				c, err := in.dial()
				if err != nil {
					return err
				}
				ctx, cancel := in.callContext()
				defer cancel()
				u, err := c.Usage(ctx, &executionv1.EnvironmentRef{Id: in.args[0], Revision: *revision}, o)
				if err != nil {
					return err
				}
				if in.cfg.Output == OutputJSON {
					return in.json(u)
				}
				return in.usageTables(u)
			}
		},
	},
	{
		name: "list", nargs: 0, summary: "usage summed per window, grouped by environment, binding, owner or client",
		example: "execctl usage list --since 24h\n" +
			"execctl usage list --owner alice --issuer https://idp.example --since 7d --granularity day\n" +
			"execctl usage list --all-clients --group-by client --since 2026-11-01T00:00:00Z --until 2026-12-01T00:00:00Z --granularity total   # administrators",
		setup: func(fs *flag.FlagSet, in *invocation) func() error {
			filters := listFlags(fs, in.getenv)
			return func() error {
				o, err := filters(time.Now())
				if err != nil {
					return err
				}
				var rows [][]string
				values := []proto.Message{}
				err = in.eachUsageRecord(o, func(r *client.UsageRecord) error {
					rows = append(rows, usageRecordRow(o.GroupBy, r))
					values = append(values, r)
					return nil
				})
				if err != nil {
					return err
				}
				return in.emit(values, usageRecordHeaders(o.GroupBy), rows)
			}
		},
	},
	{
		name: "export", nargs: 0, summary: "one line per record and window, for a billing system (JSON lines or CSV)",
		details: exportHelp,
		example: "execctl usage export --format csv --since 48h > usage.csv\n" +
			"execctl usage export --format jsonl --all-clients --since 2026-11-30T00:00:00Z --until 2026-12-01T00:00:00Z\n" +
			"execctl usage export --format jsonl --closed-only=false --since 1h   # open windows too: their counts still grow",
		setup: func(fs *flag.FlagSet, in *invocation) func() error {
			filters := listFlags(fs, in.getenv)
			format := fs.String("format", formatJSONL, "jsonl (one JSON object a line) or csv (with a header row)")
			closedOnly := fs.Bool("closed-only", true, "only closed windows: nothing more will be added to them, so each is imported once")
			return func() error {
				o, err := filters(time.Now())
				var p cli.Problems
				p.OneOf("format", *format, formatJSONL, formatCSV)
				if err == nil {
					err = p.Err()
				}
				if err != nil {
					return err
				}
				w := newExportWriter(in.out, *format)
				err = in.eachUsageRecord(o, func(r *client.UsageRecord) error {
					if *closedOnly && !r.GetWindow().GetClosed() {
						return nil
					}
					return w.write(r)
				})
				if err != nil {
					// What was written stays: a repeated export replaces it (the
					// idempotency key), and the exit status says it is incomplete.
					w.abort()
					return err
				}
				return w.flush()
			}
		},
	},
}}

// exportHelp describes export's lines: their format and which of them a billing system
// takes is part of the command's contract (docs/operations.md says the same).
const exportHelp = `Each line is one record's window: window_start, window_end (RFC 3339, UTC), closed,
environment, revision, binding, owner_hash, client_hash, profile (the key fields of the
grouping; the others empty), then every counter under its API field name: cpu_nanoseconds,
memory_kib_seconds, memory_peak_bytes, storage_kib_seconds, ready_milliseconds,
suspended_milliseconds, commands, bytes_in, bytes_out.

By default only closed windows are written: a window is closed once it ended long enough
ago that nothing more will be added to it, so a billing system imports each closed window
once. Grouped by environment (the default), (revision, window_start) is a line's
idempotency key: importing the same window again must replace, not add. With another
--group-by, the grouping's key field (binding, owner_hash, client_hash) and window_start
are; keep one --granularity (an hour and the day holding it overlap). An open window's
counts still grow (--closed-only=false shows them). Overlapping runs (--since 48h every
day) are the safe schedule: a window seen twice is replaced, none is missed. A failed
export exits non-zero after the lines it wrote: run it again.`
